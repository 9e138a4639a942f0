# The container images' recipes (images/*.image, docs/images.md), checked without
# building an image: every file they name is built and every library those files load
# belongs to a Debian package (the package lists are derived from it). Runs after the
# build. `make images-test` runs the images themselves.
add_test(NAME lint.images_recipes
         COMMAND ${PROJECT_SOURCE_DIR}/images/build.sh --plan ${CMAKE_BINARY_DIR})
# The check attacked: a library from outside Debian, an unknown keyword, a missing file.
add_test(NAME lint.images_recipes_unpackaged
         COMMAND ${PROJECT_SOURCE_DIR}/tests/lib/expect_fail.sh
                 "no Debian package ships [^ ]*/fakegpu/libcuda.so.1"
                 ${CMAKE_COMMAND} -E env
                 VGPU_IMAGE_RECIPES=${PROJECT_SOURCE_DIR}/tests/data/images
                 LD_LIBRARY_PATH=${CMAKE_BINARY_DIR}/fakegpu
                 ${PROJECT_SOURCE_DIR}/images/build.sh --plan ${CMAKE_BINARY_DIR} unpackaged)
add_test(NAME lint.images_recipes_bad_keyword
         COMMAND ${PROJECT_SOURCE_DIR}/tests/lib/expect_fail.sh
                 "bad_keyword.image:4: unknown keyword 'entrypiont'"
                 ${CMAKE_COMMAND} -E env
                 VGPU_IMAGE_RECIPES=${PROJECT_SOURCE_DIR}/tests/data/images
                 ${PROJECT_SOURCE_DIR}/images/build.sh --plan ${CMAKE_BINARY_DIR} bad_keyword)
add_test(NAME lint.images_recipes_missing_file
         COMMAND ${PROJECT_SOURCE_DIR}/tests/lib/expect_fail.sh
                 "missing_file.image:2: [^ ]*/bin/vgpu-no-such-binary is not built"
                 ${CMAKE_COMMAND} -E env
                 VGPU_IMAGE_RECIPES=${PROJECT_SOURCE_DIR}/tests/data/images
                 ${PROJECT_SOURCE_DIR}/images/build.sh --plan ${CMAKE_BINARY_DIR} missing_file)
set_tests_properties(lint.images_recipes lint.images_recipes_unpackaged
                     lint.images_recipes_bad_keyword lint.images_recipes_missing_file
                     PROPERTIES LABELS "lint;nosan" TIMEOUT 120)
