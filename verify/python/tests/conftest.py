# The package's fixtures. An installed dsv4_oracle registers its plugin itself (entry point pytest11);
# run from the build tree (ctest), the package is only on PYTHONPATH, so register it here.
from importlib.metadata import entry_points

_installed = any(ep.name == "dsv4_oracle" for ep in entry_points(group="pytest11"))
pytest_plugins = [] if _installed else ["dsv4_oracle.pytest_plugin"]
