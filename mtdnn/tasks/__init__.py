"""Task definitions (YAML to validated objects), data loading, tokenization and caching, batch schedules,
stratified subsets. Imports only :mod:`mtdnn.errors` and :mod:`mtdnn.fileio`.
"""
