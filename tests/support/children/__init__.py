"""Scripts the tests run as child processes; a test may import a script's shared values."""
