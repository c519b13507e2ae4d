"""The wheel carries what the commands read at run time: the charts, the schema and the trainer's image
recipe (generator/paths.py's BUNDLE, copied under generator/_resources/), beside the Go modules'
files (package data of generator.controlplane, declared in pyproject.toml). Everything else is in
pyproject.toml. The trainer's image installs from a context without generator/, and gets the
trainer alone."""
import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _paths():
    """generator/paths.py read by its file: the build has none of the generator's dependencies."""
    spec = importlib.util.spec_from_file_location("_pytorchjob_kit_paths", HERE / "generator" / "paths.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithResources(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False) or not (HERE / "generator").is_dir():
            return  # an editable install reads the checkout itself; the trainer's image has no generator
        paths = _paths()
        target = Path(self.build_lib) / "generator" / paths.BUNDLED.name
        shutil.rmtree(target, ignore_errors=True)
        for name in paths.BUNDLE:
            source, dest = HERE / name, target / name
            if source.is_dir():
                shutil.copytree(source, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, dest)


setup(cmdclass={"build_py": BuildWithResources})
