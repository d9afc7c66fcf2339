//! From pasted text to requests: which objects are machines, which VCDCluster each one uses,
//! and where every input error sits (input, line, field path).

use std::path::Path;

use nicpolicy_plugin::{Inventory, Request};
use serde::Serialize;
use serde_json::Value;

use nicpolicy_inputs::manifest::{mark_control_plane, ManifestError, ManifestFile, Object};
use nicpolicy_inputs::request::build_request;

/// The page's inputs, as typed or dropped.
#[derive(Clone, Copy, Debug, Default)]
pub struct Inputs<'a> {
    /// The cluster manifest: a VCDCluster, or a whole `clusterctl generate cluster` output
    /// (whose VCDMachineTemplates are evaluated too).
    pub cluster: &'a str,
    /// VCDMachines or VCDMachineTemplates (several documents or a `kind: List`); may be empty.
    pub machines: &'a str,
    /// The org VDC's network inventory; empty for none.
    pub inventory: &'a str,
}

/// What is wrong with an input, and where.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InputError {
    /// The input at fault: `cluster`, `machines`, `inventory`, or a settings label.
    pub input: String,
    /// 1-based line, for a syntax error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// 1-based column, for a syntax error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    /// Path of the field at fault, like `document 2: spec.extraOvdcNetworks[1]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// The whole message, as `nicpolicy eval` prints it (`machines:3:7: ...`).
    pub message: String,
}

impl From<ManifestError> for InputError {
    fn from(error: ManifestError) -> Self {
        let message = error.to_string();
        let (path, line, column, field) = match error {
            ManifestError::Syntax {
                path, line, column, ..
            } => (path, line, column, None),
            ManifestError::Field { path, field, .. } => (path, None, None, Some(field)),
            ManifestError::Read { path, .. }
            | ManifestError::Missing { path, .. }
            | ManifestError::Ambiguous { path, .. }
            | ManifestError::Cluster { path, .. }
            | ManifestError::TooLarge { path } => (path, None, None, None),
        };
        InputError {
            input: path.display().to_string(),
            line,
            column,
            field,
            message,
        }
    }
}

/// One machine found in the inputs, with its request or the reason there is none.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MachineEntry {
    /// The input it was found in (`cluster` or `machines`).
    pub input: String,
    /// Where in that input, like `document 3` or `items[1]`; empty for a lone object.
    pub position: String,
    /// `kind` of the object.
    pub kind: String,
    /// `metadata.name` of the object.
    pub name: String,
    /// The request to evaluate (settings left `null`: each policy gets its own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request: Option<Request>,
    /// Why no request could be built for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<InputError>,
}

/// Everything read from the inputs.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Outcome {
    /// Every VCDMachine and VCDMachineTemplate, in input order (cluster input first).
    pub machines: Vec<MachineEntry>,
    /// Errors that concern a whole input (syntax, inventory, no machine at all).
    pub errors: Vec<InputError>,
}

/// Reads the inputs. Each machine is paired with the VCDCluster of the cluster input (or, when
/// that holds none, of the machines input), picked by its `cluster.x-k8s.io/cluster-name` label
/// when there are several, exactly as `nicpolicy eval --cluster` picks it. When the inventory
/// is given but unreadable no machine is evaluated: without it the decisions would silently be
/// those of a site without an inventory.
pub fn read(inputs: &Inputs<'_>) -> Outcome {
    let mut outcome = Outcome::default();
    let cluster = parse("cluster", inputs.cluster, &mut outcome.errors);
    let machines = parse("machines", inputs.machines, &mut outcome.errors);
    let inventory = match inputs.inventory.trim() {
        "" => Ok(None),
        text => ManifestFile::parse(Path::new("inventory"), text)
            .and_then(|file| file.inventory())
            .map(Some),
    };
    let inventory = match inventory {
        Ok(inventory) => inventory,
        Err(error) => {
            outcome.errors.push(error.into());
            return outcome;
        }
    };
    let (Some(cluster), Some(machines)) = (cluster, machines) else {
        return outcome;
    };
    let has_cluster = |file: &ManifestFile| file.of_kinds(&["VCDCluster"]).next().is_some();
    let cluster_source = if !has_cluster(&cluster) && has_cluster(&machines) {
        &machines
    } else {
        &cluster
    };
    for file in [&cluster, &machines] {
        for object in file.machines() {
            outcome
                .machines
                .push(entry(file, object, cluster_source, inventory.as_ref()));
        }
    }
    if outcome.machines.is_empty() {
        // The host's own "no machine" error, naming the kinds that were found in both inputs.
        let everything: Vec<Value> = [&cluster, &machines]
            .iter()
            .flat_map(|file| file.objects.iter().map(|object| object.value.clone()))
            .collect();
        if let Err(error) = ManifestFile::from_documents(Path::new("machines"), everything)
            .and_then(|file| file.machine(None).map(|_| ()))
        {
            outcome.errors.push(error.into());
        }
    }
    outcome
}

/// The settings input of one policy: a mapping, or `null` when empty.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum SettingsOutcome {
    /// The settings, as JSON.
    Settings(Value),
    /// Why they cannot be read.
    Error(InputError),
}

/// Reads one policy's settings the way `nicpolicy eval --settings FILE` does; `label` names the
/// input in errors.
pub fn settings(label: &str, text: &str) -> SettingsOutcome {
    match ManifestFile::parse(Path::new(label), text).and_then(|file| file.settings()) {
        Ok(settings) => SettingsOutcome::Settings(settings),
        Err(error) => SettingsOutcome::Error(error.into()),
    }
}

fn parse(label: &str, text: &str, errors: &mut Vec<InputError>) -> Option<ManifestFile> {
    ManifestFile::parse(Path::new(label), text)
        .map_err(|error| errors.push(error.into()))
        .ok()
}

/// The request of one machine object, built from that object alone so that a file holding
/// several machines needs no `--machine-name`.
fn entry(
    file: &ManifestFile,
    object: &Object,
    cluster: &ManifestFile,
    inventory: Option<&Inventory>,
) -> MachineEntry {
    let single = ManifestFile::from_documents(&file.path, vec![object.value.clone()]);
    let request = single
        .and_then(|single| build_request(&single, None, Some(cluster), None, inventory.cloned()))
        .map(|mut request| {
            // The lone object's file is not the input: a KubeadmControlPlane beside it there
            // makes it a control-plane template, as `nicpolicy eval` of the input finds.
            mark_control_plane(&mut request.machine, request.kind, &[file, cluster]);
            request
        });
    let (request, error) = match request {
        Ok(request) => (Some(request), None),
        Err(error) => {
            let mut error = InputError::from(error);
            // Field paths inside the lone object get back the position it had in its input.
            if error.input == file.path.display().to_string() && !object.position.is_empty() {
                error.field = Some(match error.field.take() {
                    Some(field) if !field.is_empty() => format!("{}: {field}", object.position),
                    _ => object.position.clone(),
                });
                error.message = format!("{} ({})", error.message, object.position);
            }
            (None, Some(error))
        }
    };
    MachineEntry {
        input: file.path.display().to_string(),
        position: object.position.clone(),
        kind: object.kind().to_string(),
        name: object.name().to_string(),
        request,
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nicpolicy_plugin::{ObjectKind, Operation, Role};

    const EXAMPLE_CLUSTER: &str = include_str!("../../../examples/cluster.yaml");
    const EXAMPLE_MACHINE: &str = include_str!("../../../examples/machine.yaml");
    const EXAMPLE_INVENTORY: &str = include_str!("../../../examples/inventory.yaml");
    const MULTIZONE: &str = include_str!("../../../tests/fixtures/cluster-multizone.yaml");
    const TWO_WORKERS: &str = include_str!("../../../tests/fixtures/machines-md-0.yaml");

    #[test]
    fn the_readme_example_becomes_one_create_request() {
        let outcome = read(&Inputs {
            cluster: EXAMPLE_CLUSTER,
            machines: EXAMPLE_MACHINE,
            inventory: EXAMPLE_INVENTORY,
        });
        assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
        let [machine] = outcome.machines.as_slice() else {
            panic!("{:?}", outcome.machines)
        };
        let request = machine.request.as_ref().expect("a request");
        assert_eq!(request.operation, Operation::Create);
        assert_eq!(request.kind, ObjectKind::VcdMachine);
        assert_eq!(request.cluster.ovdc_network, "mgmt-net");
        assert_eq!(
            request.machine.extra_ovdc_networks,
            ["storage-net", "workload-net"]
        );
        assert_eq!(
            request.inventory.as_ref().map(|i| i.networks.len()),
            Some(5)
        );
    }

    #[test]
    fn every_machine_of_a_list_gets_its_own_request() {
        let outcome = read(&Inputs {
            cluster: EXAMPLE_CLUSTER,
            machines: TWO_WORKERS,
            inventory: "",
        });
        let names: Vec<&str> = outcome.machines.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["prod-eu1-md-0-x7k2p", "prod-eu1-md-0-9fq4n"]);
        assert_eq!(outcome.machines[1].position, "items[1]");
        assert!(outcome.machines.iter().all(|m| m.request.is_some()));
    }

    #[test]
    fn templates_inside_a_generated_cluster_are_evaluated() {
        let generated = format!(
            "{MULTIZONE}---\n{}",
            r#"apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDMachineTemplate
metadata:
  name: prod-eu1-control-plane
  namespace: prod-eu1
spec:
  template:
    metadata:
      labels: {cluster.x-k8s.io/control-plane: ""}
    spec:
      failureDomain: zone-b
      extraOvdcNetworks: [storage-net]
"#
        );
        let outcome = read(&Inputs {
            cluster: &generated,
            ..Inputs::default()
        });
        let [template] = outcome.machines.as_slice() else {
            panic!("{outcome:?}")
        };
        assert_eq!(template.input, "cluster");
        let request = template.request.as_ref().expect("a request");
        assert_eq!(request.kind, ObjectKind::VcdMachineTemplate);
        assert_eq!(request.machine.role, Role::ControlPlane);
        assert_eq!(request.cluster.zones.len(), 3);
    }

    #[test]
    fn a_template_a_kubeadm_control_plane_builds_from_is_a_control_plane_one() {
        // As clusterctl renders it: neither object labels the template; the
        // KubeadmControlPlane names it (in the machines input, not beside the cluster).
        let machines = r#"apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDMachineTemplate
metadata:
  name: prod-eu1-control-plane
  namespace: prod-eu1
spec:
  template:
    spec:
      extraOvdcNetworks: [storage-net]
---
apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDMachineTemplate
metadata:
  name: prod-eu1-md-0
  namespace: prod-eu1
spec:
  template:
    spec:
      extraOvdcNetworks: [storage-net]
---
apiVersion: controlplane.cluster.x-k8s.io/v1beta1
kind: KubeadmControlPlane
metadata:
  name: prod-eu1-control-plane
  namespace: prod-eu1
spec:
  machineTemplate:
    infrastructureRef:
      apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
      kind: VCDMachineTemplate
      name: prod-eu1-control-plane
"#;
        let outcome = read(&Inputs {
            cluster: EXAMPLE_CLUSTER,
            machines,
            inventory: "",
        });
        let roles: Vec<(String, Role)> = outcome
            .machines
            .iter()
            .map(|m| {
                (
                    m.name.clone(),
                    m.request.as_ref().expect("a request").machine.role,
                )
            })
            .collect();
        assert_eq!(
            roles,
            [
                ("prod-eu1-control-plane".to_string(), Role::ControlPlane),
                ("prod-eu1-md-0".to_string(), Role::Worker)
            ]
        );
    }

    #[test]
    fn syntax_errors_keep_their_line() {
        let outcome = read(&Inputs {
            cluster: EXAMPLE_CLUSTER,
            machines: "kind: VCDMachine\nspec:\n  extraOvdcNetworks: [storage-net\n",
            inventory: "",
        });
        let [error] = outcome.errors.as_slice() else {
            panic!("{outcome:?}")
        };
        assert_eq!(error.input, "machines");
        assert!(error.line.is_some(), "{error:?}");
        assert!(error.message.starts_with("machines:"), "{error:?}");
    }

    #[test]
    fn field_errors_name_the_document() {
        let machines = format!(
            "{EXAMPLE_MACHINE}---\n{}",
            EXAMPLE_MACHINE.replace("- workload-net", "- {name: workload-net}")
        );
        let outcome = read(&Inputs {
            cluster: EXAMPLE_CLUSTER,
            machines: &machines,
            inventory: "",
        });
        assert!(outcome.machines[0].error.is_none());
        let error = outcome.machines[1].error.as_ref().expect("an error");
        assert_eq!(
            error.field.as_deref(),
            Some("document 2: spec.extraOvdcNetworks[1]")
        );
    }

    #[test]
    fn a_bad_inventory_stops_evaluation() {
        let outcome = read(&Inputs {
            cluster: EXAMPLE_CLUSTER,
            machines: EXAMPLE_MACHINE,
            inventory: "networks:\n  - name: mgmt-net\n    gateway: 10.10.0.300\n",
        });
        assert!(outcome.machines.is_empty());
        assert_eq!(
            outcome.errors[0].field.as_deref(),
            Some("networks[0].gateway")
        );
    }

    #[test]
    fn no_machine_is_an_error_naming_what_was_found() {
        let outcome = read(&Inputs {
            cluster: EXAMPLE_CLUSTER,
            ..Inputs::default()
        });
        assert!(outcome.errors[0].message.contains("Cluster, VCDCluster"));
    }

    #[test]
    fn settings_are_read_like_a_settings_file() {
        match settings("settings", "maxNics: 6\n") {
            SettingsOutcome::Settings(value) => assert_eq!(value["maxNics"], 6),
            SettingsOutcome::Error(error) => panic!("{error:?}"),
        }
        assert!(matches!(
            settings("settings", ""),
            SettingsOutcome::Settings(Value::Null)
        ));
        assert!(matches!(
            settings("settings", "- 1\n- 2\n"),
            SettingsOutcome::Error(_)
        ));
    }
}
