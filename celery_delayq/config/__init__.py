"""App-wide configuration: the settings registry and the errors every process role shares."""
