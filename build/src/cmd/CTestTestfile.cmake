# CMake generated Testfile for 
# Source directory: /work/main/src/cmd
# Build directory: /work/main/build/src/cmd
# 
# This file includes the relevant testing commands required for 
# testing this directory and lists subdirectories to be tested as well.
