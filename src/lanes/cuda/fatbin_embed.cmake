# fatbin_embed.cmake - run as `cmake -DIN=kernels.fatbin -DOUT=kernels_fatbin.c -P fatbin_embed.cmake`:
# writes the fatbin as a C byte array weft_cuda_fatbin (16-byte aligned, as cuModuleLoadData wants) and its
# size weft_cuda_fatbin_size. Pure CMake, so the build needs nothing beyond nvcc.
foreach(v IN ITEMS IN OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "fatbin_embed.cmake: -D${v}=... is required")
  endif()
endforeach()
file(READ ${IN} hex HEX)
string(LENGTH "${hex}" nhex)
math(EXPR nbytes "${nhex} / 2")
if(nbytes EQUAL 0)
  message(FATAL_ERROR "${IN} is empty")
endif()
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x..,){20})" "\\1\n  " bytes "${bytes}")
file(WRITE ${OUT}.tmp
  "/* Generated from the CUDA lane's kernels by fatbin_embed.cmake: do not edit. */\n"
  "#include <stddef.h>\n"
  "_Alignas(16) const unsigned char weft_cuda_fatbin[${nbytes}] = {\n  ${bytes}\n};\n"
  "const size_t weft_cuda_fatbin_size = ${nbytes};\n")
file(RENAME ${OUT}.tmp ${OUT})
