file(REMOVE_RECURSE
  "../../archive/libvgpu_base_preload.a"
  "../../archive/libvgpu_base_preload.pdb"
  "CMakeFiles/vgpu_base_preload.dir/err.c.o"
  "CMakeFiles/vgpu_base_preload.dir/err.c.o.d"
  "CMakeFiles/vgpu_base_preload.dir/log.c.o"
  "CMakeFiles/vgpu_base_preload.dir/log.c.o.d"
  "CMakeFiles/vgpu_base_preload.dir/mem.c.o"
  "CMakeFiles/vgpu_base_preload.dir/mem.c.o.d"
  "CMakeFiles/vgpu_base_preload.dir/parse.c.o"
  "CMakeFiles/vgpu_base_preload.dir/parse.c.o.d"
  "CMakeFiles/vgpu_base_preload.dir/prng.c.o"
  "CMakeFiles/vgpu_base_preload.dir/prng.c.o.d"
  "CMakeFiles/vgpu_base_preload.dir/str.c.o"
  "CMakeFiles/vgpu_base_preload.dir/str.c.o.d"
)

# Per-language clean rules from dependency scanning.
foreach(lang C)
  include(CMakeFiles/vgpu_base_preload.dir/cmake_clean_${lang}.cmake OPTIONAL)
endforeach()
