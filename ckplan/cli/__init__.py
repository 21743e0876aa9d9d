"""The command-line interface: parse, call the library, render. No formulas live here."""
