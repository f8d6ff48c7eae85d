from netprof.profiler.cli import main

main()
