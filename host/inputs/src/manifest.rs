//! Reading Kubernetes manifests (kubectl YAML or JSON) into the pieces of a
//! [`Request`](nicpolicy_plugin::Request) ([`crate::request`] puts them together).
//!
//! Files may hold several documents (`---`) or a `kind: List`, with or without `status` and
//! `managedFields`; the objects are picked by kind. VCDMachine, VCDMachineTemplate and
//! VCDCluster are read at `infrastructure.cluster.x-k8s.io/v1beta3` and `v1beta2`, whose network
//! fields are the same. Each object is mapped by [`nicpolicy_plugin::objects`]; this module adds
//! the files: YAML or JSON text, several documents, and errors that name the file, the line and
//! column, or the object and field.

use std::fmt;
use std::path::{Path, PathBuf};

use nicpolicy_plugin::objects::{
    cluster_from_object, inventory_from_object, machine_from_object, FieldError,
};
use nicpolicy_plugin::{Cluster, Inventory, Machine, ObjectKind};

use serde::Deserialize;
use serde_json::Value;

pub use nicpolicy_plugin::objects::{check_inventory, CAPVCD_GROUP, SUPPORTED_VERSIONS};

/// Why a manifest could not be used. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The file could not be read.
    #[error("{}: cannot read: {error}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        error: std::io::Error,
    },
    /// The YAML or JSON does not parse.
    #[error("{}{}: {message}", path.display(), location(*line, *column))]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line, when the parser knows it.
        line: Option<usize>,
        /// 1-based column, when the parser knows it.
        column: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// A field has the wrong type or value.
    #[error("{}: {field}: {message}", path.display())]
    Field {
        /// The file.
        path: PathBuf,
        /// Path of the field inside the object, like `spec.extraOvdcNetworks[1]`.
        field: String,
        /// What is wrong.
        message: String,
    },
    /// No object of the expected kind in the file.
    #[error("{}: no {expected} in this file (found: {found})", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
        /// The kinds looked for.
        expected: String,
        /// The kinds present.
        found: String,
    },
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error("{}: the file is over the {}-MiB limit of a manifest; split it", path.display(), MAX_FILE_BYTES >> 20)]
    TooLarge {
        /// The file.
        path: PathBuf,
    },
    /// The machine's cluster is not in the files ([`crate::clusters::StaticClusters::find`]
    /// says why).
    #[error("{}: {machine}: {message}", path.display())]
    Cluster {
        /// The cluster file.
        path: PathBuf,
        /// The machine, as `VCDMachine prod-eu1/prod-eu1-md-0-x7k2p`.
        machine: String,
        /// Why its cluster was not found.
        message: String,
    },
    /// Several candidate objects and no way to choose.
    #[error("{}: {count} {kind} objects ({names}); {hint}", path.display())]
    Ambiguous {
        /// The file.
        path: PathBuf,
        /// How many.
        count: usize,
        /// Their kind.
        kind: String,
        /// Their names.
        names: String,
        /// How to choose.
        hint: String,
    },
}

fn location(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!(":{l}:{c}"),
        (Some(l), None) => format!(":{l}"),
        _ => String::new(),
    }
}

/// One object from a file, with where it sits (for error paths).
#[derive(Clone, Debug)]
pub struct Object {
    /// The object.
    pub value: Value,
    /// Position prefix, like `document 2` or `items[3]`; empty for a lone object.
    pub position: String,
}

impl Object {
    /// `kind` of the object, or "".
    pub fn kind(&self) -> &str {
        self.value.get("kind").and_then(Value::as_str).unwrap_or("")
    }

    /// `metadata.name` of the object, or "".
    pub fn name(&self) -> &str {
        self.value
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
    }
}

/// Largest manifest, settings, inventory, case or configuration file read, in bytes: a
/// `kubectl get vcdmachines -A -o yaml` of several thousand machines fits.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Most nodes (scalars, sequences, mappings) a YAML file of `len` bytes may expand to, aliases
/// included: twice its size plus a little. A document without aliases has fewer nodes than
/// bytes, so this only stops alias expansion, which `serde_yaml_ng` bounds for nesting
/// (exponential) but not for breadth (one anchor of 3,000 items aliased 3,000 times is 9
/// million nodes from 15 KB).
pub fn max_yaml_nodes(len: usize) -> usize {
    len.saturating_mul(2).saturating_add(10_000)
}

/// Most bytes of text (scalars and keys) a YAML file of `len` bytes may expand to, aliases
/// included: twice its size plus 64 KiB. A document's scalars without aliases take fewer bytes
/// than the file, so this only stops alias expansion of long scalars, which the node bound
/// does not see (one aliased 1 MiB string is one node: 64 aliases of it are 64 MiB of text).
pub fn max_yaml_bytes(len: usize) -> usize {
    len.saturating_mul(2).saturating_add(64 << 10)
}

/// All the objects in a manifest file.
#[derive(Clone, Debug)]
pub struct ManifestFile {
    /// The file's path, as given.
    pub path: PathBuf,
    /// Its objects, `List` items flattened.
    pub objects: Vec<Object>,
}

impl ManifestFile {
    /// Reads and parses a file.
    pub fn read(path: &Path) -> Result<ManifestFile, ManifestError> {
        let text = read_text(path)?;
        Self::parse(path, &text)
    }

    /// Parses text as the content of `path` (YAML, JSON, several documents allowed).
    pub fn parse(path: &Path, text: &str) -> Result<ManifestFile, ManifestError> {
        // Text pasted into the playground comes here without passing `read_text`.
        if text.len() as u64 > MAX_FILE_BYTES {
            return Err(ManifestError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let documents = parse_documents(path, text)?;
        Self::from_documents(path, documents)
    }

    /// Objects already parsed (for example inline in a case file); `path` labels errors.
    pub fn from_documents(
        path: &Path,
        documents: Vec<Value>,
    ) -> Result<ManifestFile, ManifestError> {
        let several = documents.len() > 1;
        let mut objects = Vec::new();
        for (i, value) in documents.into_iter().enumerate() {
            let position = if several {
                format!("document {}", i + 1)
            } else {
                String::new()
            };
            let is_list = value.get("kind").and_then(Value::as_str) == Some("List");
            match (is_list, value) {
                (true, Value::Object(mut map)) => {
                    let items = match map.remove("items") {
                        Some(Value::Array(items)) => items,
                        Some(Value::Null) | None => Vec::new(),
                        Some(_) => {
                            return Err(ManifestError::Field {
                                path: path.to_path_buf(),
                                field: join(&position, "items"),
                                message: "a List's items must be an array".into(),
                            })
                        }
                    };
                    for (j, mut item) in items.into_iter().enumerate() {
                        drop_nulls(&mut item);
                        objects.push(Object {
                            value: item,
                            position: join(&position, &format!("items[{j}]")),
                        });
                    }
                }
                (_, Value::Null) => {}
                (_, mut value) => {
                    drop_nulls(&mut value);
                    objects.push(Object { value, position })
                }
            }
        }
        Ok(ManifestFile {
            path: path.to_path_buf(),
            objects,
        })
    }

    fn kinds(&self) -> String {
        let kinds: Vec<&str> = self
            .objects
            .iter()
            .map(|o| {
                if o.kind().is_empty() {
                    "an object without kind"
                } else {
                    o.kind()
                }
            })
            .collect();
        if kinds.is_empty() {
            "nothing".to_string()
        } else {
            kinds.join(", ")
        }
    }

    /// The objects of one of `kinds`.
    pub fn of_kinds<'a>(&'a self, kinds: &'a [&str]) -> impl Iterator<Item = &'a Object> + 'a {
        self.objects
            .iter()
            .filter(move |o| kinds.contains(&o.kind()))
    }

    /// Every machine of the file (VCDMachines and VCDMachineTemplates, the kinds of
    /// [`ObjectKind::ALL`]), in file order: the one enumerator that `eval`, `audit`, the
    /// controller and the playground share.
    pub fn machines(&self) -> impl Iterator<Item = &Object> + '_ {
        self.objects
            .iter()
            .filter(|o| ObjectKind::from_kind(o.kind()).is_some())
    }

    /// An error about `field` of `object` (a path inside it), placed in this file.
    pub fn field_error(
        &self,
        object: &Object,
        field: &str,
        message: impl fmt::Display,
    ) -> ManifestError {
        ManifestError::Field {
            path: self.path.clone(),
            field: join(&object.position, field),
            message: message.to_string(),
        }
    }

    /// An error of [`nicpolicy_plugin::objects`] about `object`, placed in this file.
    fn object_error(&self, object: &Object, error: FieldError) -> ManifestError {
        self.field_error(object, &error.field, error.message)
    }

    /// The one machine (VCDMachine or VCDMachineTemplate) in the file; `name` picks one when
    /// there are several.
    pub fn machine(&self, name: Option<&str>) -> Result<(ObjectKind, Machine), ManifestError> {
        let object = self.find_machine(name)?;
        self.machine_object(object)
    }

    /// The object [`ManifestFile::machine`] reads, as it stands in the file.
    ///
    /// # Errors
    /// As for [`ManifestFile::machine`]: no such machine, or several and no name.
    pub fn find_machine(&self, name: Option<&str>) -> Result<&Object, ManifestError> {
        let candidates: Vec<&Object> = self
            .machines()
            .filter(|o| name.is_none_or(|n| o.name() == n))
            .collect();
        let object = match candidates.as_slice() {
            [one] => *one,
            [] => {
                return Err(ManifestError::Missing {
                    path: self.path.clone(),
                    expected: match name {
                        Some(n) => format!("VCDMachine or VCDMachineTemplate named {n:?}"),
                        None => "VCDMachine or VCDMachineTemplate".to_string(),
                    },
                    found: self.kinds(),
                })
            }
            several => {
                return Err(ManifestError::Ambiguous {
                    path: self.path.clone(),
                    count: several.len(),
                    kind: "machine".to_string(),
                    names: several
                        .iter()
                        .map(|o| o.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                    hint: "choose one with --machine-name".to_string(),
                })
            }
        };
        Ok(object)
    }

    /// Reads `object` (a VCDMachine or VCDMachineTemplate of this file) into the schema's
    /// machine.
    ///
    /// # Errors
    /// The field at fault, with the object's place in the file.
    pub fn machine_object(&self, object: &Object) -> Result<(ObjectKind, Machine), ManifestError> {
        machine_from_object(&object.value).map_err(|err| self.object_error(object, err))
    }

    /// The VCDMachineTemplates that a KubeadmControlPlane of this file builds its machines from
    /// (`spec.machineTemplate.infrastructureRef`), as (namespace, name): control-plane
    /// templates, which clusterctl's output labels as neither.
    pub fn control_plane_templates(&self) -> Vec<(String, String)> {
        self.of_kinds(&["KubeadmControlPlane"])
            .filter_map(|object| {
                let reference = object
                    .value
                    .pointer("/spec/machineTemplate/infrastructureRef")?;
                if reference.get("kind").and_then(Value::as_str) != Some("VCDMachineTemplate") {
                    return None;
                }
                let name = reference.get("name").and_then(Value::as_str)?;
                Some((
                    namespace_or_default(&object.value).to_string(),
                    name.to_string(),
                ))
            })
            .collect()
    }

    /// Reads `object` (a VCDCluster of this file) into the schema's cluster.
    pub fn cluster_object(&self, object: &Object) -> Result<Cluster, ManifestError> {
        cluster_from_object(&object.value).map_err(|err| self.object_error(object, err))
    }
}

/// Removes the fields whose value is `null`, at every depth, so objects read as kubectl reads
/// them: CAPVCD's own samples write `spec:` followed only by a comment, which YAML reads as a
/// null spec and the API server (Go's JSON decoding) as an empty one.
fn drop_nulls(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|_, v| !v.is_null());
            map.values_mut().for_each(drop_nulls);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_nulls),
        _ => {}
    }
}

fn join(prefix: &str, field: &str) -> String {
    match (prefix.is_empty(), field.is_empty()) {
        (true, _) => field.to_string(),
        (false, true) => prefix.to_string(),
        (false, false) => format!("{prefix}: {field}"),
    }
}

/// Parses YAML (several documents allowed) or JSON into values.
fn parse_documents(path: &Path, text: &str) -> Result<Vec<Value>, ManifestError> {
    let syntax =
        |line: Option<usize>, column: Option<usize>, message: String| ManifestError::Syntax {
            path: path.to_path_buf(),
            line,
            column,
            message,
        };
    if text.trim_start().starts_with(['{', '[']) {
        let mut stream = serde_json::Deserializer::from_str(text).into_iter::<Value>();
        let mut values = Vec::new();
        for value in &mut stream {
            let value = value.map_err(|err| {
                syntax(
                    Some(err.line()),
                    Some(err.column()),
                    strip_position(&err.to_string()),
                )
            })?;
            match value {
                // A top-level array is taken as a list of objects.
                Value::Array(items) => values.extend(items),
                other => values.push(other),
            }
        }
        return Ok(values);
    }
    let yaml_error = |err: serde_yaml_ng::Error| {
        let at = err.location();
        syntax(
            at.as_ref().map(|l| l.line()),
            at.as_ref().map(|l| l.column()),
            strip_position(&err.to_string()),
        )
    };
    // Counted first, without building anything: a file whose aliases expand past the bound is
    // refused before it can take memory or time.
    let mut budget = NodeBudget {
        left: max_yaml_nodes(text.len()),
        limit: max_yaml_nodes(text.len()),
        bytes_left: max_yaml_bytes(text.len()),
        bytes_limit: max_yaml_bytes(text.len()),
    };
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        serde::de::DeserializeSeed::deserialize(Counted(&mut budget), document)
            .map_err(yaml_error)?;
    }
    let mut values = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(text) {
        values.push(Value::deserialize(document).map_err(yaml_error)?);
    }
    Ok(values)
}

/// Reads `path` as UTF-8 text of at most [`MAX_FILE_BYTES`], without reading past the limit
/// (a file that grows, a pipe, a device).
pub fn read_text(path: &Path) -> Result<String, ManifestError> {
    let read_error = |error| ManifestError::Read {
        path: path.to_path_buf(),
        error,
    };
    let bytes = match crate::files::read_at_most(path, MAX_FILE_BYTES) {
        Ok(bytes) => bytes,
        Err(crate::files::BoundedReadError::Io(error)) => return Err(read_error(error)),
        Err(crate::files::BoundedReadError::Over { .. }) => {
            return Err(ManifestError::TooLarge {
                path: path.to_path_buf(),
            })
        }
    };
    String::from_utf8(bytes).map_err(|err| {
        read_error(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (at byte {})",
                err.utf8_error().valid_up_to()
            ),
        ))
    })
}

/// What is left of the nodes, and of the bytes of text, a YAML file may expand to.
struct NodeBudget {
    left: usize,
    limit: usize,
    bytes_left: usize,
    bytes_limit: usize,
}

/// Walks one YAML document as serde sees it (aliases replayed) and counts its nodes against
/// the budget, building nothing; stops with an error at the node that goes over.
struct Counted<'a>(&'a mut NodeBudget);

impl Counted<'_> {
    fn take<E: serde::de::Error>(&mut self) -> Result<(), E> {
        match self.0.left.checked_sub(1) {
            Some(left) => {
                self.0.left = left;
                Ok(())
            }
            None => Err(E::custom(format!(
                "the file expands to more than {} nodes with its YAML aliases replayed, the \
                 bound for a file of its size (an anchor aliased this often is no manifest)",
                self.0.limit
            ))),
        }
    }

    /// One scalar of `len` bytes of text: a node, and its bytes.
    fn take_text<E: serde::de::Error>(&mut self, len: usize) -> Result<(), E> {
        self.take()?;
        match self.0.bytes_left.checked_sub(len) {
            Some(left) => {
                self.0.bytes_left = left;
                Ok(())
            }
            None => Err(E::custom(format!(
                "the file expands to more than {} bytes of text with its YAML aliases \
                 replayed, the bound for a file of its size (a long value aliased this often \
                 is no manifest)",
                self.0.bytes_limit
            ))),
        }
    }
}

impl<'de> serde::de::DeserializeSeed<'de> for Counted<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> serde::de::Visitor<'de> for Counted<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(mut self, _: bool) -> Result<(), E> {
        self.take()
    }

    fn visit_i64<E: serde::de::Error>(mut self, _: i64) -> Result<(), E> {
        self.take()
    }

    fn visit_u64<E: serde::de::Error>(mut self, _: u64) -> Result<(), E> {
        self.take()
    }

    fn visit_f64<E: serde::de::Error>(mut self, _: f64) -> Result<(), E> {
        self.take()
    }

    fn visit_str<E: serde::de::Error>(mut self, text: &str) -> Result<(), E> {
        self.take_text(text.len())
    }

    fn visit_bytes<E: serde::de::Error>(mut self, bytes: &[u8]) -> Result<(), E> {
        self.take_text(bytes.len())
    }

    fn visit_none<E: serde::de::Error>(mut self) -> Result<(), E> {
        self.take()
    }

    fn visit_unit<E: serde::de::Error>(mut self) -> Result<(), E> {
        self.take()
    }

    fn visit_some<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        serde::de::DeserializeSeed::deserialize(self, deserializer)
    }

    fn visit_newtype_struct<D: serde::Deserializer<'de>>(
        self,
        deserializer: D,
    ) -> Result<(), D::Error> {
        serde::de::DeserializeSeed::deserialize(self, deserializer)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        self.take()?;
        while seq.next_element_seed(Counted(&mut *self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        self.take()?;
        while map.next_key_seed(Counted(&mut *self.0))?.is_some() {
            map.next_value_seed(Counted(&mut *self.0))?;
        }
        Ok(())
    }

    fn visit_enum<A: serde::de::EnumAccess<'de>>(mut self, data: A) -> Result<(), A::Error> {
        // A tagged node (`!tag value`): the tag and its value.
        self.take()?;
        let ((), variant) = data.variant_seed(Counted(&mut *self.0))?;
        serde::de::VariantAccess::newtype_variant_seed(variant, Counted(self.0))
    }
}

/// Drops the parser's own "at line X column Y" (the error shows `file:line:column`).
fn strip_position(message: &str) -> String {
    match message.find(" at line ") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    }
}

/// Reads a settings file (YAML or JSON object); an empty file means no settings.
pub fn read_settings(path: &Path) -> Result<Value, ManifestError> {
    ManifestFile::read(path)?.settings()
}

/// Reads and checks an inventory file: `networks:` with name, type, gateway, prefixLength,
/// staticIpRanges and dns per network (optionally under `kind: NetworkInventory`).
pub fn read_inventory(path: &Path) -> Result<Inventory, ManifestError> {
    ManifestFile::read(path)?.inventory()
}

impl ManifestFile {
    fn single(&self, what: &str) -> Result<Option<&Object>, ManifestError> {
        match self.objects.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(one)),
            several => Err(ManifestError::Ambiguous {
                path: self.path.clone(),
                count: several.len(),
                kind: "document".to_string(),
                names: what.to_string(),
                hint: format!("a {what} file holds one document"),
            }),
        }
    }

    /// The file as policy settings: one mapping, or nothing (no settings).
    pub fn settings(&self) -> Result<Value, ManifestError> {
        match self.single("settings")? {
            None => Ok(Value::Null),
            Some(one) if one.value.is_object() => Ok(one.value.clone()),
            Some(one) => {
                Err(self.field_error(one, "", "settings must be a mapping of names to values"))
            }
        }
    }

    /// The file as a network inventory, checked with [`check_inventory`].
    pub fn inventory(&self) -> Result<Inventory, ManifestError> {
        let object = self
            .single("inventory")?
            .ok_or_else(|| ManifestError::Missing {
                path: self.path.clone(),
                expected: "network inventory (networks: [...])".to_string(),
                found: "nothing".to_string(),
            })?;
        inventory_from_object(&object.value).map_err(|err| self.object_error(object, err))
    }
}

/// An object's namespace, `default` when it names none (as the API server defaults it).
pub fn namespace_or_default(object: &Value) -> &str {
    object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
        .unwrap_or("default")
}

/// The one rule for a machine's role beyond its labels: a VCDMachineTemplate that a
/// KubeadmControlPlane of `files` builds from is a control-plane template (clusterctl's output
/// labels neither). `eval`, `audit`, the controller and the playground all apply it.
pub fn mark_control_plane(machine: &mut Machine, kind: ObjectKind, files: &[&ManifestFile]) {
    if kind != ObjectKind::VcdMachineTemplate {
        return;
    }
    let namespace = if machine.namespace.is_empty() {
        "default"
    } else {
        machine.namespace.as_str()
    };
    let named = files.iter().any(|file| {
        file.control_plane_templates()
            .iter()
            .any(|(ns, name)| ns == namespace && *name == machine.name)
    });
    if named {
        machine.role = nicpolicy_plugin::Role::ControlPlane;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn parse(text: &str) -> ManifestFile {
        ManifestFile::parse(Path::new("machine.yaml"), text).expect("parses")
    }

    /// A worker of `prod-eu1` with two extra networks, as CAPVCD stores it.
    pub(crate) const MACHINE: &str = r#"
apiVersion: infrastructure.cluster.x-k8s.io/v1beta3
kind: VCDMachine
metadata:
  name: prod-eu1-md-0-x7k2p
  namespace: prod-eu1
  labels:
    cluster.x-k8s.io/cluster-name: prod-eu1
  managedFields:
  - manager: capvcd
spec:
  providerID: vmware-cloud-director://urn:vcloud:vm:4a7f
  extraOvdcNetworks: [storage-net, workload-net]
  template: ubuntu-2204-kube-v1.31
status:
  ready: true
"#;

    #[test]
    fn reads_machine_with_status_and_managed_fields() {
        let (kind, m) = parse(MACHINE).machine(None).unwrap();
        assert_eq!(kind, ObjectKind::VcdMachine);
        assert_eq!(m.extra_ovdc_networks, ["storage-net", "workload-net"]);
        assert!(m.is_provisioned());
        assert_eq!(m.role, nicpolicy_plugin::Role::Worker);
    }

    #[test]
    fn field_errors_name_the_path() {
        let text = MACHINE.replace("[storage-net, workload-net]", "[storage-net, {name: x}]");
        let err = parse(&text).machine(None).unwrap_err();
        assert!(
            err.to_string().contains("spec.extraOvdcNetworks[1]"),
            "{err}"
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let err =
            ManifestFile::parse(Path::new("m.yaml"), "kind: VCDMachine\nspec: [\n").unwrap_err();
        assert!(
            matches!(err, ManifestError::Syntax { line: Some(_), .. }),
            "{err}"
        );
        let err = ManifestFile::parse(Path::new("m.json"), "{\"kind\": \n\"VCDMachine\",, }")
            .unwrap_err();
        assert!(err.to_string().starts_with("m.json:2:"), "{err}");
    }

    #[test]
    fn old_api_versions_are_refused() {
        let text = MACHINE.replace("v1beta3", "v1alpha4");
        let err = parse(&text).machine(None).unwrap_err();
        assert!(err.to_string().contains("apiVersion"), "{err}");
    }

    #[test]
    fn template_and_list_are_read() {
        let list = r#"{"apiVersion": "v1", "kind": "List", "items": [
          {"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta2", "kind": "VCDMachineTemplate",
           "metadata": {"name": "prod-eu1-control-plane"},
           "spec": {"template": {"metadata": {"labels": {"cluster.x-k8s.io/control-plane": ""}},
                                 "spec": {"extraOvdcNetworks": ["storage-net"]}}}}]}"#;
        let (kind, m) = ManifestFile::parse(Path::new("l.json"), list)
            .unwrap()
            .machine(None)
            .unwrap();
        assert_eq!(kind, ObjectKind::VcdMachineTemplate);
        assert_eq!(m.role, nicpolicy_plugin::Role::ControlPlane);
        assert_eq!(m.extra_ovdc_networks, ["storage-net"]);
    }

    #[test]
    fn machines_are_every_vcdmachine_and_template_in_file_order() {
        let text = format!(
            "{MACHINE}---\napiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: VCDCluster\n\
             metadata: {{name: prod-eu1, namespace: prod-eu1}}\n---\n\
             apiVersion: controlplane.cluster.x-k8s.io/v1beta1\nkind: KubeadmControlPlane\n\
             metadata: {{name: prod-eu1-control-plane, namespace: prod-eu1}}\n---\n\
             apiVersion: infrastructure.cluster.x-k8s.io/v1beta2\nkind: VCDMachineTemplate\n\
             metadata: {{name: prod-eu1-md-0, namespace: prod-eu1}}\n\
             spec: {{template: {{spec: {{extraOvdcNetworks: [storage-net]}}}}}}\n"
        );
        let file = parse(&text);
        let machines: Vec<(&str, &str)> = file.machines().map(|o| (o.kind(), o.name())).collect();
        assert_eq!(
            machines,
            [
                ("VCDMachine", "prod-eu1-md-0-x7k2p"),
                ("VCDMachineTemplate", "prod-eu1-md-0")
            ]
        );
    }

    #[test]
    fn a_long_value_aliased_past_the_byte_bound_is_refused_before_it_is_built() {
        let long = "n".repeat(64 << 10);
        let aliased = |copies: usize| {
            let mut text = format!("kind: ConfigMap\nanchor: &a {long}\ncopies:\n");
            text.push_str(&"  - *a\n".repeat(copies));
            text
        };
        // Twice the file and 64 KiB: one copy fits, four do not.
        assert!(ManifestFile::parse(Path::new("one.yaml"), &aliased(1)).is_ok());
        let err = ManifestFile::parse(Path::new("four.yaml"), &aliased(4)).expect_err("refused");
        let text = err.to_string();
        assert!(text.starts_with("four.yaml"), "{text}");
        assert!(
            text.contains("bytes of text with its YAML aliases replayed"),
            "{text}"
        );
    }

    #[test]
    fn inventory_checks_addresses() {
        let inv: Inventory = serde_json::from_value(serde_json::json!({"networks": [
            {"name": "storage-net", "gateway": "10.20.0.1", "prefixLength": 24,
             "staticIpRanges": [{"start": "10.20.0.50", "end": "10.20.0.10"}]}
        ]}))
        .unwrap();
        let (field, _) = check_inventory(&inv).unwrap_err();
        assert_eq!(field, "networks[0].staticIpRanges[0]");
    }
}
