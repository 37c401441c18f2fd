# vulkan.cmake - the Vulkan lane: finds the headers and shader tools, compiles the GLSL kernels to SPIR-V,
# checks that exact-contract shaders cannot fuse a multiply and an add, and embeds the SPIR-V in the library.
#
# WEFT_VULKAN: AUTO builds the lane when vulkan/vulkan.h, glslc and spirv-dis are found (and says why not
# otherwise); ON requires them; OFF leaves the lane out. The loader itself is opened at run time (dlopen), so
# the library needs no Vulkan to be installed where it runs.
set(_weft_vk_mode "${WEFT_VULKAN}")
string(TOUPPER "${_weft_vk_mode}" _weft_vk_mode)
if(_weft_vk_mode STREQUAL "OFF")
  message(STATUS "weft: Vulkan lane off (WEFT_VULKAN=OFF)")
  return()
endif()

find_path(WEFT_VULKAN_INCLUDE_DIR vulkan/vulkan.h)
find_program(WEFT_GLSLC glslc)
find_program(WEFT_SPIRV_DIS spirv-dis)
find_program(WEFT_SPIRV_VAL spirv-val) # same package as spirv-dis; used when present
set(_weft_vk_missing "")
if(NOT WEFT_VULKAN_INCLUDE_DIR)
  list(APPEND _weft_vk_missing "vulkan/vulkan.h (Debian: libvulkan-dev)")
endif()
if(NOT WEFT_GLSLC)
  list(APPEND _weft_vk_missing "glslc (Debian: glslc)")
endif()
if(NOT WEFT_SPIRV_DIS)
  list(APPEND _weft_vk_missing "spirv-dis (Debian: spirv-tools)")
endif()
if(_weft_vk_missing)
  string(REPLACE ";" ", " _weft_vk_missing "${_weft_vk_missing}")
  if(_weft_vk_mode STREQUAL "ON")
    message(FATAL_ERROR "weft: WEFT_VULKAN=ON but the Vulkan lane needs: ${_weft_vk_missing}")
  endif()
  message(STATUS "weft: Vulkan lane left out: not found: ${_weft_vk_missing}")
  return()
endif()
message(STATUS "weft: Vulkan lane on (headers ${WEFT_VULKAN_INCLUDE_DIR}, ${WEFT_GLSLC})")

set(_weft_vk_dir ${CMAKE_CURRENT_LIST_DIR})
set(_weft_vk_gen ${CMAKE_BINARY_DIR}/vulkan_spirv)
file(MAKE_DIRECTORY ${_weft_vk_gen})

# weft_vulkan_shader(NAME SOURCE EXACT|FP32 [DEFINES...]): SOURCE -> NAME.spv -> checked -> NAME.spv.c, which
# defines weft_vk_spv_NAME and weft_vk_spv_NAME_size. Exact shaders are built without -O: spirv-opt's loop
# unroller (2023.1) drops NoContraction from the copies it makes, which the check below would catch anyway.
set(_weft_vk_spv_sources "")
set(_weft_vk_spv_names "")
function(weft_vulkan_shader name source contract)
  set(src ${_weft_vk_dir}/shaders/${source})
  set(spv ${_weft_vk_gen}/${name}.spv)
  set(out ${_weft_vk_gen}/${name}.spv.c)
  set(defs "")
  foreach(d ${ARGN})
    list(APPEND defs "-D${d}")
  endforeach()
  if(contract STREQUAL "EXACT")
    set(opt "")
    set(exact 1)
  else()
    set(opt "-O")
    set(exact 0)
  endif()
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${WEFT_GLSLC} --target-env=vulkan1.0 ${opt} ${defs} -I ${_weft_vk_dir}/shaders -o ${spv} ${src}
    COMMAND ${CMAKE_COMMAND} -DSPV=${spv} -DOUT=${out} -DNAME=${name} -DEXACT=${exact}
            -DSPIRV_DIS=${WEFT_SPIRV_DIS}
            -DSPIRV_VAL=${WEFT_SPIRV_VAL} -P ${_weft_vk_dir}/spirv_embed.cmake
    DEPENDS ${src} ${_weft_vk_dir}/shaders/wmath.glsl ${_weft_vk_dir}/shaders/common.glsl ${_weft_vk_dir}/shaders/matmul_pc.glsl
            ${_weft_vk_dir}/shaders/epilogue.glsl
            ${_weft_vk_dir}/spirv_embed.cmake ${PROJECT_SOURCE_DIR}/cmake/embed_bytes.cmake
    COMMENT "SPIR-V ${name} (${contract})"
    VERBATIM)
  set(_weft_vk_spv_sources ${_weft_vk_spv_sources} ${out} PARENT_SCOPE)
  set(_weft_vk_spv_names ${_weft_vk_spv_names} ${name} PARENT_SCOPE)
endfunction()

weft_vulkan_shader(ew ew.comp EXACT)
weft_vulkan_shader(sum_rows sum_rows.comp EXACT)
weft_vulkan_shader(softmax_rows softmax_rows.comp EXACT)
weft_vulkan_shader(softmax_loss softmax_loss.comp EXACT)
weft_vulkan_shader(matmul_simple matmul_simple.comp EXACT)
weft_vulkan_shader(matmul_t88 matmul_tiled.comp EXACT TM=8 TN=8)
weft_vulkan_shader(matmul_t44 matmul_tiled.comp EXACT TM=4 TN=4)
weft_vulkan_shader(matmul_t88k16 matmul_tiled.comp EXACT TM=8 TN=8 BK=16)
weft_vulkan_shader(matmul_t88_fp32 matmul_tiled.comp FP32 TM=8 TN=8 WEFT_FP32=1)
weft_vulkan_shader(matmul_t44_fp32 matmul_tiled.comp FP32 TM=4 TN=4 WEFT_FP32=1)
# The transformer ops (reference_tx.c), exact, dispatched by vk_ops.c (tests/vulkan/test_vk_tx.c also runs
# them directly). One source may build several kernels, chosen by a define.
weft_vulkan_shader(tx_embed_fwd tx_embed.comp EXACT EMB_FWD=1)
weft_vulkan_shader(tx_embed_links tx_embed.comp EXACT EMB_LINKS=1)
weft_vulkan_shader(tx_embed_bwd tx_embed.comp EXACT EMB_BWD=1)
weft_vulkan_shader(tx_ln_fwd tx_layernorm.comp EXACT LN_FWD=1)
# add + layernorm fused (src/lanes/fuse.h)
weft_vulkan_shader(tx_ln_add_fwd tx_layernorm.comp EXACT LN_FWD=1 LN_ADD=1)
weft_vulkan_shader(tx_ln_bwd_dx tx_layernorm.comp EXACT LN_BWD_DX=1)
weft_vulkan_shader(tx_ln_bwd_dgb tx_layernorm.comp EXACT LN_BWD_DGB=1)
weft_vulkan_shader(tx_gelu_fwd tx_gelu.comp EXACT)
weft_vulkan_shader(tx_gelu_bwd tx_gelu.comp EXACT GELU_BWD=1)
weft_vulkan_shader(tx_softmax_fwd tx_softmax.comp EXACT)
weft_vulkan_shader(tx_softmax_bwd tx_softmax.comp EXACT SM_BWD=1)
weft_vulkan_shader(tx_att_fwd tx_attention.comp EXACT ATT_FWD=1)
weft_vulkan_shader(tx_att_ds tx_attention.comp EXACT ATT_DS=1)
weft_vulkan_shader(tx_att_dqkv tx_attention.comp EXACT ATT_DQKV=1)
weft_vulkan_shader(tx_xent_rows tx_xent.comp EXACT XENT_ROWS=1)
weft_vulkan_shader(tx_xent_grad tx_xent.comp EXACT XENT_GRAD=1)
weft_vulkan_shader(tx_adamw tx_adamw.comp EXACT)
weft_vulkan_shader(tx_permute tx_copy.comp EXACT COPY_PERMUTE=1)
weft_vulkan_shader(tx_copy_slice tx_copy.comp EXACT COPY_SLICE=1)

target_sources(weft_obj PRIVATE
  ${_weft_vk_dir}/vk_loader.c
  ${_weft_vk_dir}/vulkan_lane.c
  ${_weft_vk_dir}/vk_ops.c
  ${_weft_vk_spv_sources})
target_include_directories(weft_obj PRIVATE ${WEFT_VULKAN_INCLUDE_DIR})
target_compile_definitions(weft_obj PRIVATE WEFT_HAVE_VULKAN VK_NO_PROTOTYPES)

# The checker must be able to fail: tests/vulkan runs it on a shader that fuses.
set(WEFT_VULKAN_EMBED_SCRIPT ${_weft_vk_dir}/spirv_embed.cmake)

# bench/CMakeLists.txt adds bench/vulkan, which builds only when this is set.
set(WEFT_VULKAN_LANE ON)
if(BUILD_TESTING)
  add_subdirectory(${PROJECT_SOURCE_DIR}/tests/vulkan ${CMAKE_BINARY_DIR}/tests/vulkan)
endif()
