# Makes a baseline no kernel can meet: every max_ulp of IN becomes -1, so the gate's allowance
# max(old + 0.5, old x 1.25) = -0.5 is below any measured error and every stats row regresses.
#   cmake -DIN=report.json -DOUT=too_good.json -P tamper_baseline.cmake
file(READ ${IN} text)
string(REGEX REPLACE "\"max_ulp\": [-0-9.e+]+" "\"max_ulp\": -1.0" text "${text}")
file(WRITE ${OUT} "${text}")
