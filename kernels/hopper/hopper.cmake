# Hopper kernels whose code needs sm_90a (wgmma, setmaxnreg): kernels/hopper/hopper*.cu, compiled
# for compute_90a / sm_90a alone in their own object library, so the rest of ac_kernels keeps the
# plain sm_90 build. nvcc before 12.0 cannot target sm_90a: then these objects are not built and
# ATTNCHECK_HAVE_SM90A stays undefined, so the subjects they back are absent (never broken).
if(ATTNCHECK_HAVE_CUDA AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
  file(GLOB AC_HOPPER_SM90A_SOURCES CONFIGURE_DEPENDS ${CMAKE_CURRENT_LIST_DIR}/hopper*.cu)
  add_library(ac_kernels_sm90a OBJECT ${AC_HOPPER_SM90A_SOURCES})
  set_target_properties(ac_kernels_sm90a PROPERTIES CUDA_ARCHITECTURES OFF)
  target_include_directories(ac_kernels_sm90a PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
  target_compile_definitions(ac_kernels_sm90a PRIVATE ATTNCHECK_HAVE_CUDA=1 ATTNCHECK_HAVE_SM90A=1)
  target_compile_options(ac_kernels_sm90a PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo>)
  target_link_libraries(ac_kernels_sm90a PRIVATE attncheck_abi attncheck_warnings CUDA::cudart_static)
  target_sources(ac_kernels PRIVATE $<TARGET_OBJECTS:ac_kernels_sm90a>)
  target_compile_definitions(ac_kernels PUBLIC ATTNCHECK_HAVE_SM90A=1)
endif()
