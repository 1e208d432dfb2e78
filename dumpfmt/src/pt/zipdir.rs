//! A strict reader of a zip archive's central directory, for STORED archives such as
//! `torch.save` writes.
//!
//! Hand-written rather than the `zip` crate: zip 9.8 refused some genuine `torch.save` files
//! ("Invalid Central Directory header") through its archive-offset and signature-scanning
//! heuristics, and those heuristics are exactly what a strict reader does not want. This reader
//! trusts only the records: end of central directory (and the ZIP64 record torch always writes),
//! central headers, local headers; every offset is checked, and errors carry the byte offset.

use std::ops::Range;

/// One STORED entry: where its bytes lie in the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZipEntry {
    pub name: Vec<u8>,
    /// Offset of the local header.
    pub header: u64,
    /// The entry's data, `start..start + size` in the file.
    pub data: Range<usize>,
    pub crc32: u32,
}

/// A byte offset and a message.
pub type ZipError = (u64, String);

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

const EOCD: &[u8; 4] = b"PK\x05\x06";
const EOCD64: &[u8; 4] = b"PK\x06\x06";
const LOCATOR64: &[u8; 4] = b"PK\x06\x07";
const CENTRAL: &[u8; 4] = b"PK\x01\x02";
const LOCAL: &[u8; 4] = b"PK\x03\x04";

/// Lists the entries of the archive `b` (all of them STORED, unencrypted and inside the file).
pub fn entries(b: &[u8]) -> Result<Vec<ZipEntry>, ZipError> {
    let len = b.len();
    if len < 22 {
        return Err((len as u64, "too short for a zip archive".into()));
    }
    // The end record is 22 bytes plus a comment of at most 65535 bytes; take the last candidate
    // whose comment length reaches exactly the end of the file.
    let lowest = len.saturating_sub(22 + 0xffff);
    let eocd = (lowest..=len.saturating_sub(22))
        .rev()
        .find(|&i| &b[i..i + 4] == EOCD && i + 22 + u16_at(b, i + 20) as usize == len)
        .ok_or_else(|| {
            (
                len as u64,
                "no zip end-of-central-directory record (truncated?)".to_string(),
            )
        })?;
    if u16_at(b, eocd + 4) != 0 || u16_at(b, eocd + 6) != 0 {
        return Err((
            eocd as u64,
            "multi-disk zip archives are not supported".into(),
        ));
    }
    let mut count = u16_at(b, eocd + 10) as u64;
    let mut cd_size = u32_at(b, eocd + 12) as u64;
    let mut cd_offset = u32_at(b, eocd + 16) as u64;
    let mut cd_limit = eocd as u64;
    if eocd >= 20 && &b[eocd - 20..eocd - 16] == LOCATOR64 {
        let loc = eocd - 20;
        let rec = u64_at(b, loc + 8);
        if rec.checked_add(56).is_none_or(|end| end > loc as u64) {
            return Err((loc as u64, "ZIP64 locator points outside the file".into()));
        }
        let r = rec as usize;
        if &b[r..r + 4] != EOCD64 {
            return Err((
                rec,
                "no ZIP64 end-of-central-directory record where the locator points".into(),
            ));
        }
        if u64_at(b, r + 4) < 44 || u32_at(b, r + 16) != 0 || u32_at(b, r + 20) != 0 {
            return Err((rec, "unsupported ZIP64 end record".into()));
        }
        count = u64_at(b, r + 32);
        cd_size = u64_at(b, r + 40);
        cd_offset = u64_at(b, r + 48);
        cd_limit = rec;
    }
    if cd_offset
        .checked_add(cd_size)
        .is_none_or(|end| end > cd_limit)
    {
        return Err((
            eocd as u64,
            "central directory lies outside the file".into(),
        ));
    }
    if count > cd_size / 46 {
        return Err((
            eocd as u64,
            format!("{count} entries cannot fit a {cd_size}-byte central directory"),
        ));
    }
    let cd_end = (cd_offset + cd_size) as usize;
    let mut at = cd_offset as usize;
    let mut out = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if at + 46 > cd_end || &b[at..at + 4] != CENTRAL {
            return Err((at as u64, "bad central directory header".into()));
        }
        let flags = u16_at(b, at + 8);
        let method = u16_at(b, at + 10);
        let crc32 = u32_at(b, at + 16);
        let mut csize = u32_at(b, at + 20) as u64;
        let mut size = u32_at(b, at + 24) as u64;
        let name_len = u16_at(b, at + 28) as usize;
        let extra_len = u16_at(b, at + 30) as usize;
        let comment_len = u16_at(b, at + 32) as usize;
        let mut header = u32_at(b, at + 42) as u64;
        let name_at = at + 46;
        let next = name_at + name_len + extra_len + comment_len;
        if next > cd_end {
            return Err((
                at as u64,
                "central directory header runs past the directory".into(),
            ));
        }
        let name = b[name_at..name_at + name_len].to_vec();
        let shown = String::from_utf8_lossy(&name).into_owned();
        // ZIP64 extended information: the 0xFFFFFFFF fields, in order, from extra field 0x0001.
        let mut extra = &b[name_at + name_len..name_at + name_len + extra_len];
        while extra.len() >= 4 {
            let (id, n) = (u16_at(extra, 0), u16_at(extra, 2) as usize);
            if extra.len() < 4 + n {
                return Err((at as u64, format!("{shown}: truncated extra field")));
            }
            if id == 1 {
                let mut vals = extra[4..4 + n].chunks_exact(8).map(|c| u64_at(c, 0));
                for field in [&mut size, &mut csize, &mut header] {
                    if *field == u32::MAX as u64 {
                        *field = vals
                            .next()
                            .ok_or_else(|| (at as u64, format!("{shown}: ZIP64 field missing")))?;
                    }
                }
            }
            extra = &extra[4 + n..];
        }
        if flags & 0x0001 != 0 {
            return Err((at as u64, format!("{shown} is encrypted")));
        }
        if method != 0 || csize != size {
            return Err((
                at as u64,
                format!("{shown} is compressed (method {method}); torch.save stores entries"),
            ));
        }
        let h = header as usize;
        if header.checked_add(30).is_none_or(|e| e > cd_offset) || &b[h..h + 4] != LOCAL {
            return Err((
                header,
                format!("{shown}: no local header where the directory points"),
            ));
        }
        let (lname, lextra) = (u16_at(b, h + 26) as usize, u16_at(b, h + 28) as usize);
        let start = h + 30 + lname + lextra;
        if start as u64 > cd_offset || b[h + 30..h + 30 + lname] != name[..] {
            return Err((
                header,
                format!("{shown}: local header disagrees with the directory"),
            ));
        }
        if u16_at(b, h + 8) != 0 {
            return Err((header, format!("{shown}: local header says compressed")));
        }
        if (start as u64)
            .checked_add(size)
            .is_none_or(|e| e > cd_offset)
        {
            return Err((
                header,
                format!("{shown}: data runs past the central directory"),
            ));
        }
        out.push(ZipEntry {
            name,
            header,
            data: start..start + size as usize,
            crc32,
        });
        at = next;
    }
    Ok(out)
}
