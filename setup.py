"""The library: utils/ installed as the package `rasterkit` (metadata in pyproject.toml). The repository
root is the ComfyUI node pack and is never installed; every package under utils/ is found here, so the
coming packages (core/, inputs/, gpu_rendering/, ...) need no listing."""

from setuptools import find_packages, setup

setup(
    package_dir={"rasterkit": "utils"},
    packages=["rasterkit", *(f"rasterkit.{name}" for name in find_packages("utils"))],
)
