# Metadata lives in setup.cfg; this file lets pip build with the system's setuptools offline.
import os

from setuptools import setup

# setup.cfg's egg_base: setuptools requires the folder to exist.
os.makedirs(os.path.join(os.path.dirname(os.path.abspath(__file__)), "build"), exist_ok=True)
setup()
