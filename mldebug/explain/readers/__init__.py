"""One module per kind of text: each `read(lines)` returns the `Explained` it can stand on."""
