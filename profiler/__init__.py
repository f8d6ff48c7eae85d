"""netprof.profiler"""
