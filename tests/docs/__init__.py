"""The docs: links resolve, examples run, published numbers match the code."""
