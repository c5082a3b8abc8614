"""A numpy that cannot be imported, as on a Python without numpy: first on PYTHONPATH, it makes
`import numpy` end in the traceback a missing numpy gives, whose last line is its cause."""
raise ModuleNotFoundError("No module named 'numpy'", name="numpy")
