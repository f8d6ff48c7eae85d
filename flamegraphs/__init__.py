"""netprof.flamegraphs"""
