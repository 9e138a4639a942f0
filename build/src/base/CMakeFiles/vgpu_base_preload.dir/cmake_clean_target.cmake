file(REMOVE_RECURSE
  "../../archive/libvgpu_base_preload.a"
)
