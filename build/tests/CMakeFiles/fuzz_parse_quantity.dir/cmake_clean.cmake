file(REMOVE_RECURSE
  "CMakeFiles/fuzz_parse_quantity.dir/fuzz/fuzz_parse_quantity.c.o"
  "CMakeFiles/fuzz_parse_quantity.dir/fuzz/fuzz_parse_quantity.c.o.d"
  "CMakeFiles/fuzz_parse_quantity.dir/fuzz/replay.c.o"
  "CMakeFiles/fuzz_parse_quantity.dir/fuzz/replay.c.o.d"
  "fuzz_parse_quantity"
  "fuzz_parse_quantity.pdb"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/fuzz_parse_quantity.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
