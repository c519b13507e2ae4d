import os
import sys

from generator.controlplane.kubelet import main

os.environ.setdefault("PYTHONUNBUFFERED", "1")
sys.exit(main())
