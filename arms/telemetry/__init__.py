"""What a server run costs on the machine: energy, power, accelerator memory, utilisation,
clocks and throttling, read around each probe run (`sampler`) from a device source
(`nvml`, `rapl`, `simulated`), each behind one `Device` interface (`device`)."""
