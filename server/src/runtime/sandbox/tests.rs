use super::args::Args;
use super::mounts::unescape_mount_path;
use super::*;

fn tools(root: bool) -> Tools {
    Tools {
        bwrap: Some("/usr/bin/bwrap".into()),
        setpriv: Some("/usr/bin/setpriv".into()),
        pasta: Some("/usr/bin/pasta".into()),
        nft: Some("/usr/sbin/nft".into()),
        socat: Some("/usr/bin/socat".into()),
        root,
    }
}

#[test]
fn the_editors_account_is_named_in_its_own_account_files() {
    let passwd = "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/sh\nold:x:61000:61000::/x:/bin/sh\n";
    let group = "root:x:0:\nuser:x:1000:\n";
    let (passwd, group) = account_files(passwd, group, (61_000, 61_000), Path::new("/home/user"));
    assert!(
        passwd.starts_with("root:x:0:0:root:/root:/bin/bash\n"),
        "{passwd}"
    );
    let last = passwd.lines().last().unwrap();
    assert!(
        last.starts_with("user:x:61000:61000:GPU Sandbox user:/home/user:/bin/"),
        "{passwd}"
    );
    assert_eq!(
        passwd.matches("user:x:").count(),
        1,
        "one entry of that name: {passwd}"
    );
    assert!(
        !passwd.contains("old:"),
        "nor another of that number: {passwd}"
    );
    assert_eq!(group, "root:x:0:\nuser:x:61000:\n");
}

#[test]
fn account_files_are_mounted_over_the_systems_where_written() {
    let run_dir = std::env::temp_dir().join(format!("gsb-account-{}", std::process::id()));
    std::fs::create_dir_all(&run_dir).unwrap();
    let spec_with = |account| {
        let command = [OsString::from("/bin/true")];
        let spec = Spec {
            system: &[PathBuf::from("/usr"), PathBuf::from("/etc")],
            tools: &[],
            hidden: &[],
            home: &run_dir,
            home_inside: Path::new("/home/user"),
            run_dir: &run_dir,
            run_inside: Path::new("/run/editor"),
            devices: &[],
            preload: None,
            account,
            workdir: Path::new("/"),
            command: &command,
            datasets: &[],
        };
        text(&arguments(&spec, &tools(true)))
    };
    assert!(
        !spec_with(Some((61_000, 61_000))).contains("/etc/passwd"),
        "none written yet"
    );
    write_account_files(&run_dir, (61_000, 61_000), Path::new("/home/user")).unwrap();
    let args = spec_with(Some((61_000, 61_000)));
    assert!(
        args.contains(&format!(
            "--ro-bind {} /etc/passwd",
            passwd_file(&run_dir).display()
        )),
        "{args}"
    );
    assert!(
        args.contains(&format!(
            "--ro-bind {} /etc/group",
            group_file(&run_dir).display()
        )),
        "{args}"
    );
    assert!(
        !spec_with(None).contains("/etc/passwd"),
        "without an account of its own"
    );
    let _ = std::fs::remove_dir_all(&run_dir);
}

fn text(args: &[OsString]) -> String {
    args.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn datasets_are_bound_read_only_over_the_home_and_a_missing_one_is_left_out() {
    let run = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let shared = tempfile::tempdir().unwrap();
    let command = ["jupyter-lab".into()];
    let datasets = [
        (shared.path().to_path_buf(), "imagenet".to_string()),
        (shared.path().join("gone"), "gone".to_string()),
    ];
    let spec = Spec {
        system: &["/usr".into()],
        tools: &[],
        hidden: &[],
        home: home.path(),
        home_inside: Path::new("/home/user"),
        run_dir: run.path(),
        run_inside: Path::new("/run/editor"),
        devices: &[],
        preload: None,
        account: Some((200_001, 200_001)),
        workdir: Path::new("/home/user"),
        command: &command,
        datasets: &datasets,
    };
    let args = text(&arguments(&spec, &tools(true)));
    let home_bind = args
        .find(&format!("--bind {} /home/user ", home.path().display()))
        .expect("the home");
    let dataset = format!(
        "--ro-bind {} /home/user/datasets/imagenet ",
        shared.path().display()
    );
    let bound = args.find(&dataset).expect(&args);
    assert!(
        bound > home_bind,
        "after the home, or the home hides it: {args}"
    );
    assert!(!args.contains("gone"), "{args}");
    assert_eq!(
        args.matches("--bind ").count(),
        2,
        "nothing more writable: {args}"
    );
}

#[test]
fn an_editor_sees_its_home_its_run_directory_and_a_read_only_system_and_nothing_else() {
    let run = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let command = ["jupyter-lab".into()];
    let spec = Spec {
        system: &["/usr".into(), "/etc".into()],
        tools: &[],
        hidden: &[],
        home: home.path(),
        home_inside: Path::new("/home/user"),
        run_dir: run.path(),
        run_inside: Path::new("/run/editor"),
        devices: &[],
        preload: None,
        account: Some((200_001, 200_001)),
        workdir: Path::new("/home/user"),
        command: &command,
        datasets: &[],
    };
    let args = text(&arguments(&spec, &tools(true)));
    assert!(
        args.contains("--unshare-pid --unshare-net --unshare-ipc"),
        "{args}"
    );
    assert!(
        args.contains("--ro-bind /usr /usr --ro-bind /etc /etc"),
        "{args}"
    );
    assert!(args.contains(&format!("--bind {} /home/user", home.path().display())));
    let run = run.path().display();
    assert!(
        args.contains(&format!("--bind {run} /run/editor")),
        "{args}"
    );
    assert!(args.contains("--perms 1777 --tmpfs /tmp"), "{args}");
    // The only writable mounts are the run directory and the home.
    assert_eq!(args.matches("--bind ").count(), 2, "{args}");
    assert!(
        args.ends_with("--reuid 200001 --regid 200001 --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs -- jupyter-lab"),
        "{args}"
    );
    assert!(
        !args.contains("--unshare-user"),
        "root makes the namespaces itself"
    );
}

#[test]
fn without_root_the_sandbox_is_a_user_namespace_of_the_servers_account() {
    let command = ["marimo".into()];
    let spec = Spec {
        system: &[],
        tools: &[],
        hidden: &[],
        home: Path::new("/nonexistent/home"),
        home_inside: Path::new("/home/user"),
        run_dir: Path::new("/nonexistent/run"),
        run_inside: Path::new("/run/editor"),
        devices: &[],
        preload: None,
        account: Some((200_001, 200_001)),
        workdir: Path::new("/home/user"),
        command: &command,
        datasets: &[],
    };
    let args = text(&arguments(&spec, &tools(false)));
    assert!(args.starts_with("--unshare-user"), "{args}");
    assert!(!args.contains("setpriv"), "{args}");
    assert!(args.ends_with("-- marimo"), "{args}");
}

#[test]
fn only_the_slices_card_is_visible_and_its_limiter_is_preloaded_for_every_program() {
    let devices = tempfile::tempdir().unwrap();
    let card = devices.path().join("nvidia1");
    let control = devices.path().join("nvidiactl");
    std::fs::write(&card, "").unwrap();
    std::fs::write(&control, "").unwrap();
    let command = ["jupyter-lab".into()];
    let run = Path::new("/srv/run/s1");
    let spec = Spec {
        system: &[],
        tools: &[],
        hidden: &[],
        home: Path::new("/srv/ws"),
        home_inside: Path::new("/home/user"),
        run_dir: run,
        run_inside: Path::new("/run/editor"),
        devices: &[
            card.clone(),
            control.clone(),
            devices.path().join("missing"),
        ],
        preload: Some(Preload {
            library: Path::new("/opt/hami/libvgpu.so"),
            pin: Some(Path::new("/opt/gs/libslice_pin.so")),
        }),
        account: None,
        workdir: Path::new("/home/user"),
        command: &command,
        datasets: &[],
    };
    let args = text(&arguments(&spec, &tools(true)));
    assert!(
        args.contains(&format!("--dev-bind {0} {0}", card.display())),
        "{args}"
    );
    assert!(args.contains(&format!("--dev-bind {0} {0}", control.display())));
    assert!(!args.contains("missing"), "{args}");
    assert!(
        args.contains("--ro-bind /srv/run/s1/ld.so.preload /etc/ld.so.preload"),
        "{args}"
    );
    assert!(
        args.contains("--ro-bind /opt/hami/libvgpu.so /usr/local/vgpu/libvgpu.so"),
        "{args}"
    );
    assert!(
        args.contains("--ro-bind /opt/gs/libslice_pin.so /usr/local/vgpu/libslice_pin.so"),
        "{args}"
    );
    assert!(
        args.contains("--ro-bind /srv/run/s1/gpu-slice.env /etc/gpu-slice.env"),
        "{args}"
    );
}

#[test]
fn the_pinned_settings_are_the_slices_limits_and_hamis_own_places() {
    let env = crate::runtime::gpu::slice_env(
        &app::domain::pool::GpuSpec {
            id: "GPU-1".into(),
            model: "L40S".into(),
            memory_mib: 49_152,
            slice_mib: 8192,
            hold: app::domain::hold::SliceHold::None,
            device_minor: Some(1),
            mig: None,
        },
        8192,
        50,
        &crate::runtime::gpu::Enforcement::HamiCore("/opt/libvgpu.so".into()),
    );
    assert_eq!(
        pinned_settings(&env),
        "CUDA_DEVICE_MEMORY_LIMIT_0=8192m\nCUDA_DEVICE_SM_LIMIT=50\n\
         CUDA_DEVICE_MEMORY_LIMIT=\nCUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/cudevshr.cache\n\
         CUDA_REDIRECT=/usr/local/vgpu/libvgpu.so\nGPU_CORE_UTILIZATION_POLICY=default\n\
         !CUDA_DISABLE_CONTROL\n"
    );
    let run = tempfile::tempdir().unwrap();
    write_preload_files(run.path(), true, &env).unwrap();
    assert_eq!(
        std::fs::read_to_string(preload_file(run.path())).unwrap(),
        format!("{PIN_INSIDE}\n{HAMI_CORE_INSIDE}\n"),
        "the pin first, so its getenv comes first"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(pinned_file(run.path()))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o644, "the editor's account reads it");
}

#[test]
fn a_file_where_the_read_only_system_has_no_mount_point_gets_its_folder_made_again() {
    let system = tempfile::tempdir().unwrap();
    let root = system.path();
    std::fs::create_dir(root.join("bin")).unwrap();
    std::fs::write(root.join("hosts"), "").unwrap();
    std::os::unix::fs::symlink("bin", root.join("sbin")).unwrap();
    let mut args = Args::default();
    let (one, two) = (
        root.join("vgpu/lib/libvgpu.so"),
        root.join("vgpu/lib/pin.so"),
    );
    let system = [root.to_path_buf()];
    args.files_at(
        &[
            (Path::new("/opt/lib.so"), &one),
            (Path::new("/opt/pin.so"), &two),
        ],
        &system,
    );
    let made = text(&args.0);
    let r = root.display();
    let expected = format!(
        "--perms 0755 --tmpfs {r} --ro-bind-try {r}/bin {r}/bin --ro-bind-try {r}/hosts {r}/hosts \
         --symlink bin {r}/sbin --perms 0755 --dir {r}/vgpu --perms 0755 --dir {r}/vgpu/lib \
         --ro-bind /opt/lib.so {r}/vgpu/lib/libvgpu.so --ro-bind /opt/pin.so {r}/vgpu/lib/pin.so \
         --remount-ro {r}"
    );
    assert_eq!(made, expected, "one folder made again for both");
    // Where the host has the file, it is mounted over; outside the system, nothing is
    // made again (bwrap then says what it cannot do).
    let mut args = Args::default();
    args.files_at(&[(Path::new("/x"), &root.join("hosts"))], &system);
    assert_eq!(text(&args.0), format!("--ro-bind /x {r}/hosts"));
    let mut args = Args::default();
    args.files_at(&[(Path::new("/x"), &root.join("new"))], &[]);
    assert_eq!(text(&args.0), format!("--ro-bind /x {r}/new"));
}

#[test]
fn the_servers_configuration_is_hidden_where_the_system_would_show_it() {
    let etc = tempfile::tempdir().unwrap();
    let config = etc.path().join("sandbox.toml");
    std::fs::write(&config, "secret").unwrap();
    let command = ["x".into()];
    let spec = Spec {
        system: &[etc.path().to_path_buf()],
        tools: &[],
        hidden: std::slice::from_ref(&config),
        home: Path::new("/h"),
        home_inside: Path::new("/home/user"),
        run_dir: Path::new("/r"),
        run_inside: Path::new("/run/editor"),
        devices: &[],
        preload: None,
        account: None,
        workdir: Path::new("/home/user"),
        command: &command,
        datasets: &[],
    };
    let args = text(&arguments(&spec, &tools(false)));
    assert!(
        args.contains(&format!("--ro-bind /dev/null {}", config.display())),
        "{args}"
    );
}

#[test]
fn mount_paths_read_as_the_kernel_escapes_them() {
    assert_eq!(unescape_mount_path("/srv/my\\040data"), "/srv/my data");
    assert_eq!(unescape_mount_path("/plain"), "/plain");
    assert!(is_mount_point(Path::new("/proc")));
    assert!(!is_mount_point(Path::new("/proc/self")));
}

#[test]
fn egress_leaves_the_hosts_loopback_out_and_forwards_only_the_products_port() {
    let args = egress_arguments(4242, Some(3000), true).join(" ");
    assert!(args.contains("--no-map-gw"), "{args}");
    assert!(args.contains("-T 3000"), "{args}");
    assert!(args.contains("-t none -u none -U none"), "{args}");
    assert!(args.ends_with("--netns /proc/4242/ns/net"), "{args}");
    assert!(
        egress_arguments(1, None, true)
            .join(" ")
            .contains("-T none")
    );
    assert!(egress_arguments(7, None, false).join(" ").ends_with(" 7"));
}
