# Metadata lives in setup.cfg; this file lets pip build with the system's setuptools offline.
from setuptools import setup

setup()
