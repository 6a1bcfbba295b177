"""One module per command or command group: parse options, call the library, render."""
