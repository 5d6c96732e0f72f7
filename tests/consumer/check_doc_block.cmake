# Checks that a fenced block of a Markdown document (the README, a file of docs/) is
# byte-for-byte a file of the repository, or what a program prints, so the document cannot drift
# from code that builds and runs as a test.
#
# The block is the fenced one right after the line "<!-- ${BLOCK} -->".
#
# cmake -DDOC=<file.md> -DBLOCK=<marker> -DEXPECTED_FILE=<file> -P check_doc_block.cmake
# cmake -DDOC=<file.md> -DBLOCK=<marker> -DPROGRAM=<executable> -P check_doc_block.cmake

cmake_minimum_required(VERSION 3.25)

file(READ "${DOC}" doc)
if(DEFINED EXPECTED_FILE)
  file(READ "${EXPECTED_FILE}" expected)
  set(source "${EXPECTED_FILE}")
  set(remedy "Copy ${EXPECTED_FILE} into the block of ${DOC}.")
elseif(DEFINED PROGRAM)
  execute_process(COMMAND "${PROGRAM}" RESULT_VARIABLE result OUTPUT_VARIABLE expected ERROR_VARIABLE errors)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${PROGRAM} failed (${result}):\n${expected}${errors}")
  endif()
  set(source "the output of ${PROGRAM}")
  set(remedy "Paste the output of ${PROGRAM} into the block of ${DOC}.")
else()
  message(FATAL_ERROR "check_doc_block.cmake: set EXPECTED_FILE or PROGRAM")
endif()

set(marker "<!-- ${BLOCK} -->\n```")
string(FIND "${doc}" "${marker}" start)
if(start EQUAL -1)
  message(FATAL_ERROR "${DOC} has no \"<!-- ${BLOCK} -->\" line followed by a ``` block")
endif()
string(SUBSTRING "${doc}" ${start} -1 rest)
string(FIND "${rest}" "\n" line_end)  # end of the marker line
string(SUBSTRING "${rest}" ${line_end} -1 rest)
string(SUBSTRING "${rest}" 1 -1 rest)
string(FIND "${rest}" "\n" line_end)  # end of the opening fence
math(EXPR line_end "${line_end} + 1")
string(SUBSTRING "${rest}" ${line_end} -1 rest)
string(FIND "${rest}" "\n```\n" end)
if(end EQUAL -1)
  message(FATAL_ERROR "the block of ${DOC} after \"<!-- ${BLOCK} -->\" is not closed by a ``` line")
endif()
math(EXPR end "${end} + 1")  # keep the block's last newline
string(SUBSTRING "${rest}" 0 ${end} block)

if(NOT block STREQUAL expected)
  # Name the first line that differs, so the fix is obvious. Strings, not lists: code is full
  # of the semicolons and brackets that CMake lists treat specially.
  set(a "${block}")
  set(b "${expected}")
  set(line 1)
  while(TRUE)
    string(FIND "${a}" "\n" a_end)
    string(FIND "${b}" "\n" b_end)
    if(a_end EQUAL -1 OR b_end EQUAL -1)
      break()
    endif()
    string(SUBSTRING "${a}" 0 ${a_end} a_line)
    string(SUBSTRING "${b}" 0 ${b_end} b_line)
    if(NOT a_line STREQUAL b_line)
      break()
    endif()
    math(EXPR a_end "${a_end} + 1")
    math(EXPR b_end "${b_end} + 1")
    string(SUBSTRING "${a}" ${a_end} -1 a)
    string(SUBSTRING "${b}" ${b_end} -1 b)
    math(EXPR line "${line} + 1")
  endwhile()
  string(REGEX REPLACE "\n.*" "" a "${a}")
  string(REGEX REPLACE "\n.*" "" b "${b}")
  message(FATAL_ERROR "the block \"${BLOCK}\" of ${DOC} differs from ${source} at line ${line}:\n"
                      "  document: ${a}\n  actual:   ${b}\n${remedy}")
endif()
message(STATUS "the block \"${BLOCK}\" of ${DOC} matches ${source}")
