"""Virtual-time replay benchmark: real workload traces through autoscaler policies in a simulated cluster."""
