
# Consider dependencies only in project.
set(CMAKE_DEPENDS_IN_PROJECT_ONLY OFF)

# The set of languages for which implicit dependencies are needed:
set(CMAKE_DEPENDS_LANGUAGES
  )

# The set of dependency files which are needed:
set(CMAKE_DEPENDS_DEPENDENCY_FILES
  "/work/main/src/base/err.c" "src/base/CMakeFiles/vgpu_base.dir/err.c.o" "gcc" "src/base/CMakeFiles/vgpu_base.dir/err.c.o.d"
  "/work/main/src/base/log.c" "src/base/CMakeFiles/vgpu_base.dir/log.c.o" "gcc" "src/base/CMakeFiles/vgpu_base.dir/log.c.o.d"
  "/work/main/src/base/mem.c" "src/base/CMakeFiles/vgpu_base.dir/mem.c.o" "gcc" "src/base/CMakeFiles/vgpu_base.dir/mem.c.o.d"
  "/work/main/src/base/parse.c" "src/base/CMakeFiles/vgpu_base.dir/parse.c.o" "gcc" "src/base/CMakeFiles/vgpu_base.dir/parse.c.o.d"
  "/work/main/src/base/prng.c" "src/base/CMakeFiles/vgpu_base.dir/prng.c.o" "gcc" "src/base/CMakeFiles/vgpu_base.dir/prng.c.o.d"
  "/work/main/src/base/str.c" "src/base/CMakeFiles/vgpu_base.dir/str.c.o" "gcc" "src/base/CMakeFiles/vgpu_base.dir/str.c.o.d"
  )

# Targets to which this target links.
set(CMAKE_TARGET_LINKED_INFO_FILES
  )

# Fortran module output directory.
set(CMAKE_Fortran_TARGET_MODULE_DIR "")
