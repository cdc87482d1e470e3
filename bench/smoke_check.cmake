# Runs one benchmark for a CTest smoke test: cmake -DPROG=... -DARGS="..." -DNAME=... -P this
# Passes when the program exits 0 and prints at least one RESULT line for benchmark NAME,
# every RESULT line is well formed, and nothing says "error:".
separate_arguments(args UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${PROG} ${args}
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message("${out}${err}")
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${PROG} ${ARGS}: exit status ${rc}")
endif()
if(NOT out MATCHES "RESULT benchmark=${NAME} threads=2 metric=")
  message(FATAL_ERROR "${PROG} ${ARGS}: no RESULT line for ${NAME}")
endif()
string(REGEX MATCHALL "RESULT[^\n]*" lines "${out}")
foreach(line ${lines})
  if(NOT line MATCHES "^RESULT benchmark=[a-z0-9-]+ threads=[0-9]+ metric=[a-z0-9_]+ value=-?[0-9][0-9.eE+-]* unit=[A-Za-z/%]+$")
    message(FATAL_ERROR "malformed result line: ${line}")
  endif()
endforeach()
if("${out}${err}" MATCHES "error:")
  message(FATAL_ERROR "${PROG} ${ARGS}: reported an error")
endif()
