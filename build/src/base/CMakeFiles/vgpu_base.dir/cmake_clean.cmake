file(REMOVE_RECURSE
  "../../archive/libvgpu_base.a"
  "../../archive/libvgpu_base.pdb"
  "CMakeFiles/vgpu_base.dir/err.c.o"
  "CMakeFiles/vgpu_base.dir/err.c.o.d"
  "CMakeFiles/vgpu_base.dir/log.c.o"
  "CMakeFiles/vgpu_base.dir/log.c.o.d"
  "CMakeFiles/vgpu_base.dir/mem.c.o"
  "CMakeFiles/vgpu_base.dir/mem.c.o.d"
  "CMakeFiles/vgpu_base.dir/parse.c.o"
  "CMakeFiles/vgpu_base.dir/parse.c.o.d"
  "CMakeFiles/vgpu_base.dir/prng.c.o"
  "CMakeFiles/vgpu_base.dir/prng.c.o.d"
  "CMakeFiles/vgpu_base.dir/str.c.o"
  "CMakeFiles/vgpu_base.dir/str.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/vgpu_base.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
