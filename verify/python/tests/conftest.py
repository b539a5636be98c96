# The package's own fixtures, as a kernel test in another project gets them from the installed plugin.
pytest_plugins = ["dsv4_oracle.pytest_plugin"]
