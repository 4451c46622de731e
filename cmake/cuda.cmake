# CUDA and NCCL detection for the device modules (exec/cuda/, comm/nccl/).
#
# DYNATRAIN_WITH_CUDA: AUTO (default) builds them when nvcc and the CUDA toolkit are found, ON
# requires them, OFF skips them. Sets DT_CUDA_FOUND and, when nccl.h and libnccl are found in the
# CUDA prefix (or the system's), DT_NCCL_FOUND with the imported target DT::nccl. One status line
# says what is not built and why; nothing else in the build changes.
set(DYNATRAIN_WITH_CUDA AUTO CACHE STRING "Build the CUDA device memory and NCCL transport: AUTO, ON or OFF")
set_property(CACHE DYNATRAIN_WITH_CUDA PROPERTY STRINGS AUTO ON OFF)

set(DT_CUDA_FOUND OFF)
set(DT_NCCL_FOUND OFF)
if(NOT DYNATRAIN_WITH_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    # One architecture: H200 / H100 machine code, plus its PTX for newer GPUs (JIT-compiled).
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES 90-real 90-virtual)
    endif()
    if(CMAKE_CXX_COMPILER_LAUNCHER AND NOT DEFINED CMAKE_CUDA_COMPILER_LAUNCHER)
      set(CMAKE_CUDA_COMPILER_LAUNCHER ${CMAKE_CXX_COMPILER_LAUNCHER})
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
    # Toolkits laid out as lib/ (pip-style) leave nvcc's implicit link directories empty.
    if(CUDAToolkit_FOUND AND NOT CMAKE_CUDA_IMPLICIT_LINK_DIRECTORIES)
      list(APPEND CMAKE_CUDA_IMPLICIT_LINK_DIRECTORIES ${CUDAToolkit_LIBRARY_DIR})
    endif()
  endif()
  if(CUDAToolkit_FOUND)
    set(DT_CUDA_FOUND ON)
  elseif(DYNATRAIN_WITH_CUDA STREQUAL "ON")
    message(FATAL_ERROR "DYNATRAIN_WITH_CUDA=ON but no CUDA compiler and toolkit were found "
                        "(set CMAKE_CUDA_COMPILER or CUDACXX to nvcc, or use AUTO / OFF)")
  endif()
endif()

if(DT_CUDA_FOUND)
  get_filename_component(DT_CUDA_PREFIX "${CUDAToolkit_BIN_DIR}" DIRECTORY)
  find_path(DT_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} ${DT_CUDA_PREFIX}/include)
  find_library(DT_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${DT_CUDA_PREFIX}/lib64 ${DT_CUDA_PREFIX}/lib)
  if(DT_NCCL_INCLUDE_DIR AND DT_NCCL_LIBRARY)
    set(DT_NCCL_FOUND ON)
    add_library(DT::nccl UNKNOWN IMPORTED)
    set_target_properties(DT::nccl PROPERTIES IMPORTED_LOCATION "${DT_NCCL_LIBRARY}"
                                              INTERFACE_INCLUDE_DIRECTORIES "${DT_NCCL_INCLUDE_DIR}")
    message(STATUS "CUDA ${CUDAToolkit_VERSION} (architectures ${CMAKE_CUDA_ARCHITECTURES}), NCCL ${DT_NCCL_LIBRARY}: exec/cuda and comm/nccl are built")
  else()
    message(STATUS "CUDA ${CUDAToolkit_VERSION}: exec/cuda is built; comm/nccl is not (nccl.h / libnccl not found)")
  endif()
elseif(DYNATRAIN_WITH_CUDA STREQUAL "OFF")
  message(STATUS "exec/cuda, comm/nccl: not built (DYNATRAIN_WITH_CUDA=OFF)")
else()
  message(STATUS "exec/cuda, comm/nccl: not built (no CUDA compiler and toolkit found)")
endif()
