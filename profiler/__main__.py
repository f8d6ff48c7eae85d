from netprof.profiler.entry import main

main()
