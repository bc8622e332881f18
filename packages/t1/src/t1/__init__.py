"""The t1 command line."""
