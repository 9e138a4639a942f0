# Empty compiler generated dependencies file for fuzz_parse_quantity.
# This may be replaced when dependencies are built.
