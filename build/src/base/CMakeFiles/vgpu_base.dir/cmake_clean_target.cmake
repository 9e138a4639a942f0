file(REMOVE_RECURSE
  "../../archive/libvgpu_base.a"
)
