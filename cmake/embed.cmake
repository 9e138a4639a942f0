# cmake -DIN=file -DOUT=file.c -DNAME=symbol -P embed.cmake: writes a C source holding the
# bytes of IN as `const unsigned char NAME[]` (NUL-terminated, not counted) and
# `const size_t NAME_len`, so a file ships inside the binary that serves it.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" hexlen)
math(EXPR len "${hexlen} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}.tmp"
     "/* Generated from ${IN} by cmake/embed.cmake; do not edit. */\n"
     "#include <stddef.h>\n"
     "extern const unsigned char ${NAME}[];\n"
     "extern const size_t ${NAME}_len;\n"
     "const unsigned char ${NAME}[] = {\n${bytes}0x00};\n"
     "const size_t ${NAME}_len = ${len};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
