"""The frameworks' save recorders, one module per framework, each importing its framework: ckplan.record names them
and imports one only when it is asked for. Where each save begins and ends in the framework's source is in
docs/design.md ("Save records")."""
