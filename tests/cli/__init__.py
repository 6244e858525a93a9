"""The command line: commands, imports, extras, hostile inputs, sweep and its report."""
