# Loads the h3bench pytest plugin when the package is not installed (the
# pytest11 entry point has the same name, so an installed plugin is not loaded twice).
pytest_plugins = ["h3bench.plugin"]
