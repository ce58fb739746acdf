use super::*;

#[test]
fn isolcpus_flags_are_skipped() {
    let cpus = kernel_param_cpus("managed_irq,domain,2-5,8", None).unwrap();
    assert_eq!(cpus.to_string(), "2-5,8");
}

#[test]
fn all_means_every_online_cpu() {
    let online = CpuSet::parse("0-7").unwrap();
    assert_eq!(kernel_param_cpus("all", Some(&online)).unwrap(), online);
    assert!(kernel_param_cpus("all", None).is_err());
}
