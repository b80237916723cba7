"""Compiles the shaders into the package when a wheel is built.

(An editable install and `make` run tools/compile_shaders.py directly.)
"""
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithShaders(build_py):
    def run(self):
        tool = Path(__file__).parent / "tools" / "compile_shaders.py"
        if tool.exists():
            subprocess.check_call([sys.executable, str(tool)])
        super().run()


setup(cmdclass={"build_py": BuildPyWithShaders})
