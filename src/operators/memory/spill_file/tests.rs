use std::fs;

use super::*;

fn dir(name: &str) -> (PathBuf, SpillDir) {
    let parent =
        std::env::temp_dir().join(format!("spill-file-test-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&parent);
    fs::create_dir_all(&parent).unwrap();
    let dir = SpillDir::create_in(&parent).unwrap();
    (parent, dir)
}

#[test]
fn records_come_back_in_order_and_the_file_goes_with_its_reader() {
    let (parent, dir) = dir("order");
    let mut writer = SpillWriter::<(u32, String)>::create(&dir, "t", 64).unwrap();
    for i in 0..1000u32 {
        writer.write(&(i, "x".repeat(i as usize % 200))).unwrap();
    }
    let file = writer.finish().unwrap();
    assert_eq!(file.records(), 1000);
    let path = file.path().to_owned();
    let back: Vec<(u32, String)> = file
        .into_reader(128)
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(back.len(), 1000);
    assert!(back.iter().enumerate().all(|(i, r)| r.0 as usize == i));
    assert!(!path.exists());
    drop(dir);
    fs::remove_dir_all(&parent).unwrap();
}

#[test]
fn a_truncated_file_is_reported_with_its_path() {
    let (parent, dir) = dir("truncated");
    let mut writer = SpillWriter::<u64>::create(&dir, "t", 64).unwrap();
    for i in 0..100u64 {
        writer.write(&i).unwrap();
    }
    let file = writer.finish().unwrap();
    let len = fs::metadata(file.path()).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(file.path())
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let results: Vec<_> = file.open::<u64>(64).unwrap().collect();
    let error = results.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(error, SpillError::Corrupt { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains(&file.path().display().to_string())
    );
    drop(file);
    drop(dir);
    fs::remove_dir_all(&parent).unwrap();
}

#[test]
fn a_dropped_writer_deletes_its_file() {
    let (parent, dir) = dir("dropped");
    let mut writer = SpillWriter::<u64>::create(&dir, "t", 64).unwrap();
    writer.write(&1).unwrap();
    let path = writer.owner.path().to_owned();
    assert!(path.exists());
    drop(writer);
    assert!(!path.exists());
    drop(dir);
    fs::remove_dir_all(&parent).unwrap();
}
