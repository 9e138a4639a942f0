# Empty compiler generated dependencies file for vgpu_base.
# This may be replaced when dependencies are built.
