"""Third-party code kept as it was published (see each package's LICENSE)."""
