import os
import sys
import traceback

from trainer import sigterm

sigterm.exit_until_the_loop()  # before torch loads: PID 1 of a container hears only the signals it handles

from trainer.cli import main  # noqa: E402

try:
    code = main()
except Exception:  # an unforeseen failure (or TRAINER_DEBUG's re-raise): told as the interpreter would
    traceback.print_exc()
    code = 1
# The process group is destroyed by now (cli.main's finally, on every path, after the trainer
# dropped DDP's wrapper). The process still ends without the interpreter's finalization or C++'s
# static destructors: a native thread that outlives them (gloo's, the store's, one running a comm
# hook) and then takes the GIL is ended by the finalizing interpreter mid-C++, and the process
# aborts with "terminate called without an active exception" (exit -6) after its work is done.
# Nothing is left to finalize: the outputs are written atomically and the streams flushed here.
sys.stdout.flush()
sys.stderr.flush()
os._exit(code)
