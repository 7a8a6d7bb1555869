//! The documented CRD upgrade, OLM fences and allow-list overlay, and an operator started against an older CRD.

use crate::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_crd_upgrade_applies_and_the_operator_accepts_the_result() {
    let client = cluster::admin().await;
    sh_ok(DOC_UPGRADE_CRD);
    let installed =
        Api::<CustomResourceDefinition>::all(client).get(neuron_dra_operator::runtime::client::CRD_NAME).await;
    assert_eq!(neuron_dra_operator::runtime::crd::check_installed(Some(&installed.unwrap())), Ok(()));
}

/// docs/install.md's OLM fences: applied where `config/rbac` already put them (as every test cluster has it), the
/// server takes each, with the shipped allow-list in their install variables and no parameters.
#[test]
fn the_documented_olm_fences_apply() {
    cluster::install();
    let _shipped = SHIPPED_FENCES.blocking_lock();
    let (stdout, _) = sh_ok(DOC_APPLY_FENCES);
    let pods = cluster::get("validatingadmissionpolicy", "neuron-dra-plugin-pods", None).unwrap();
    // The documented apply put back the shipped allow-list; the tests' driver namespaces need theirs.
    cluster::allow_test_drivers();
    for object in [
        "validatingadmissionpolicy.admissionregistration.k8s.io/neuron-dra-operator",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/neuron-dra-operator",
        "validatingadmissionpolicy.admissionregistration.k8s.io/neuron-dra-plugin-fence",
        "validatingadmissionpolicy.admissionregistration.k8s.io/neuron-dra-plugin-pods",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/neuron-dra-plugin-fence",
        "validatingadmissionpolicybinding.admissionregistration.k8s.io/neuron-dra-plugin-pods",
    ] {
        assert!(stdout.lines().any(|l| l.starts_with(object)), "{object} not applied:\n{stdout}");
    }
    let variables: Vec<(String, String)> = pods["spec"]["variables"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| INSTALL_VARIABLES.contains(&v["name"].as_str().unwrap()))
        .map(|v| (v["name"].as_str().unwrap().to_string(), v["expression"].as_str().unwrap().to_string()))
        .collect();
    let shipped = |name: &str, list: &str| (name.to_string(), list.to_string());
    assert_eq!(
        variables,
        [
            shipped("namespacePatterns", "['neuron-dra-driver']"),
            shipped("imagePatterns", "['public.ecr.aws/neuron/neuron-dra-driver']"),
            shipped("operators", "['system:serviceaccount:neuron-dra-operator-system:neuron-dra-operator']"),
            shipped("kubeletDirs", "['/var/lib/kubelet']"),
        ]
    );
    assert!(pods["spec"].get("paramKind").is_none(), "{pods}");
    for name in ["neuron-dra-operator", "neuron-dra-plugin-fence", "neuron-dra-plugin-pods"] {
        let binding = cluster::get("validatingadmissionpolicybinding", name, None).unwrap();
        assert!(binding["spec"].get("paramRef").is_none(), "{binding}");
    }
}

/// A policy spec with its install variables' expressions blanked.
fn fixed_part(object: &Value) -> Value {
    let mut object = object.clone();
    for variable in object["spec"]["variables"].as_array_mut().into_iter().flatten() {
        if variable["name"].as_str().is_some_and(|name| INSTALL_VARIABLES.contains(&name)) {
            variable["expression"] = json!("");
        }
    }
    object
}

/// The expression of a policy's variable `name`.
fn variable(policy: &Value, name: &str) -> String {
    let variables = policy["spec"]["variables"].as_array().unwrap();
    let found = variables.iter().find(|v| v["name"] == name).unwrap_or_else(|| panic!("no variable {name}"));
    found["expression"].as_str().unwrap().to_string()
}

/// docs/install.md's overlay that changes the allow-list, as the page shows it (in a directory beside `config/`):
/// it sets the same lists in both policies' install variables and changes nothing else `config/default` installs;
/// the API server takes it (a server dry run); and its `test` operations refuse a patch whose variable moved.
#[test]
fn the_documented_allow_list_overlay_sets_both_policies_and_nothing_else() {
    let doc = std::fs::read_to_string(repo("docs/install.md")).unwrap();
    let overlay = doc
        .split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split("\n```").next())
        .find(|block| block.contains("patches:"))
        .expect("docs/install.md shows no overlay")
        .to_string();
    assert!(overlay.contains("- ../config/default\n"), "{overlay}");
    // Under target/, two levels below the checkout.
    let name = cluster::unique("install-overlay");
    let dir = repo("target").join(&name);
    std::fs::create_dir_all(&dir).unwrap();
    let write = |text: &str| std::fs::write(dir.join("kustomization.yaml"), text).unwrap();
    write(&overlay.replace("- ../config/default\n", "- ../../config/default\n"));
    let built = kustomize(&format!("target/{name}"));
    let shipped = kustomize("config/default");
    assert_eq!(built.len(), shipped.len());
    let namespaces = "['neuron-dra-driver', 'team-*']";
    let images =
        "['public.ecr.aws/neuron/neuron-dra-driver', '111122223333.dkr.ecr.us-west-2.amazonaws.com/neuron-dra-driver']";
    for (built, shipped) in built.iter().zip(&shipped) {
        let name = built["metadata"]["name"].as_str().unwrap();
        if built["kind"] == "ValidatingAdmissionPolicy"
            && ["neuron-dra-operator", "neuron-dra-plugin-pods"].contains(&name)
        {
            assert_eq!(variable(built, "namespacePatterns"), namespaces, "{name}");
            assert_eq!(variable(built, "imagePatterns"), images, "{name}");
            assert_eq!(fixed_part(built), fixed_part(shipped), "{name}: more than its install variables changed");
        } else {
            assert_eq!(built, shipped, "the overlay changed {} {name}", built["kind"]);
        }
    }
    let pods = find(&built, "ValidatingAdmissionPolicy", "neuron-dra-plugin-pods");
    assert_eq!(
        variable(pods, "operators"),
        variable(find(&shipped, "ValidatingAdmissionPolicy", "neuron-dra-plugin-pods"), "operators")
    );

    // The server compiles the patched expressions (a dry run changes nothing).
    cluster::install();
    let (stdout, _) = sh_ok(&format!("kubectl apply -k target/{name} --dry-run=server"));
    assert!(
        stdout.contains("validatingadmissionpolicy.admissionregistration.k8s.io/neuron-dra-plugin-pods"),
        "{stdout}"
    );

    // A variable moved: the patch is refused, not applied to another variable.
    write(
        &overlay
            .replace("- ../config/default\n", "- ../../config/default\n")
            .replace("/spec/variables/1/name", "/spec/variables/0/name"),
    );
    let out = sh(&format!("kubectl kustomize target/{name}"));
    assert!(!out.status.success(), "a patch of a moved variable applied");
    assert!(String::from_utf8_lossy(&out.stderr).contains("test failed"), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A throwaway CRD, deleted when dropped.
struct ThrowawayCrd(String);

impl Drop for ThrowawayCrd {
    fn drop(&mut self) {
        let _ = cluster::kubectl_with(&cluster::kubeconfig(), &["delete", "crd", &self.0, "--wait=false"], None);
    }
}

/// Runs `neuron-dra-operator run` with its CRD check pointed at `crd_name`; returns its exit status and stderr,
/// or panics if it is still running after 30 s (it started instead of refusing).
fn run_operator_checking(crd_name: &str) -> (std::process::ExitStatus, String) {
    let dir = temp_dir(crd_name);
    let log = dir.join("operator.log");
    let mut child = Command::new(BIN)
        .args(["run", "--metrics-addr", "127.0.0.1:0", "--probe-addr", "127.0.0.1:0", "--leader-elect", "false"])
        .env("KUBECONFIG", cluster::kubeconfig())
        .env(neuron_dra_operator::runtime::client::CHECK_CRD_ENV, crd_name)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the operator started against {crd_name}: {}", std::fs::read_to_string(&log).unwrap());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    (status, std::fs::read_to_string(&log).unwrap())
}

/// An operator started against an older CRD exits non-zero and names the upgrade procedure, shown on the real API server
/// without touching the real CRD (other tests use it in parallel): the test creates a throwaway copy of this
/// build's CRD under a test-unique group, renamed (kind, plural, no short names or categories, so `kubectl get ndc`
/// elsewhere never resolves to it) and annotated as written by operator 0.0.1, and points the operator's check at
/// it with `NEURONDRA_TEST_CHECK_CRD`. The operator runs with the admin kubeconfig here because the shipped RBAC
/// lets it read only the real CRD. A name that exists nowhere shows the "not installed" refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_started_against_an_older_or_missing_crd_exits_naming_the_upgrade_procedure() {
    let client = cluster::admin().await;
    let group = format!("{}.neurondra.io", cluster::unique("crdold"));
    let mut older = neuron_dra_operator::runtime::crd::crd();
    older.metadata.name = Some(format!("olderconfigs.{group}"));
    older.metadata.annotations = Some(
        [
            (neuron_dra_operator::runtime::crd::ANNOTATION_VERSION.to_string(), "0.0.1".to_string()),
            (neuron_dra_operator::runtime::crd::ANNOTATION_SCHEMA_HASH.to_string(), "0000".to_string()),
        ]
        .into(),
    );
    older.spec.group = group.clone();
    older.spec.names.kind = "OlderConfig".into();
    older.spec.names.list_kind = Some("OlderConfigList".into());
    older.spec.names.plural = "olderconfigs".into();
    older.spec.names.singular = Some("olderconfig".into());
    older.spec.names.short_names = None;
    older.spec.names.categories = None;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    api.create(&PostParams::default(), &older).await.unwrap();
    let crd = ThrowawayCrd(format!("olderconfigs.{group}"));

    let (status, stderr) = run_operator_checking(&crd.0);
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("is older than this operator"), "{stderr}");
    // It names the one upgrade procedure, docs/install.md's "Upgrading", instead of commands of its own.
    let doc = neuron_dra_operator::runtime::crd::UPGRADE_DOC;
    assert!(stderr.contains(doc), "no upgrade procedure in: {stderr}");
    assert!(doc.ends_with("/docs/install.md#upgrading"));
    assert!(std::fs::read_to_string(repo("docs/install.md")).unwrap().contains("\n## Upgrading\n"));

    let (status, stderr) = run_operator_checking(&format!("missing.{group}"));
    assert!(!status.success(), "{stderr}");
    assert!(stderr.contains("is not installed"), "{stderr}");
}
