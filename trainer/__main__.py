import os
import sys

from trainer.cli import main

code = main()
# The process group is destroyed by now (cli.main, on every path). Leaving without the
# interpreter's finalization means no native thread (gloo's, the store's) can meet a half torn
# down interpreter: one that then takes the GIL is ended by it mid-C++, and the process aborts
# with "terminate called without an active exception" (exit -6) after its work is done.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
