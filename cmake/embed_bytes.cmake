# embed_bytes.cmake - one function for the build steps that turn a binary (SPIR-V, a CUDA fatbin) into a C
# byte array: weft_embed_bytes(IN OUT SYMBOL ALIGN SOURCE) writes OUT with
#   _Alignas(ALIGN) const unsigned char SYMBOL[n] = {...}; const size_t SYMBOL_size = n;
# through a temporary file and a rename, so an interrupted build never leaves half a file. Pure CMake (file
# READ HEX): the build needs no xxd. For use from `cmake -P` scripts.
function(weft_embed_bytes in out symbol align source)
  file(READ ${in} hex HEX)
  string(LENGTH "${hex}" nhex)
  math(EXPR nbytes "${nhex} / 2")
  if(nbytes EQUAL 0)
    message(FATAL_ERROR "${in} is empty")
  endif()
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "((0x..,){16})" "\\1\n  " bytes "${bytes}")
  file(WRITE ${out}.tmp
    "/* Generated from ${source}: do not edit. */\n"
    "#include <stddef.h>\n"
    "_Alignas(${align}) const unsigned char ${symbol}[${nbytes}] = {\n  ${bytes}\n};\n"
    "const size_t ${symbol}_size = ${nbytes};\n")
  file(RENAME ${out}.tmp ${out})
endfunction()
