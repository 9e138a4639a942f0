# Empty compiler generated dependencies file for vgpu_base_preload.
# This may be replaced when dependencies are built.
