use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;

/// An IKE_SA_INIT request header as RFC 7296 §3.1 lays it out (hand-assembled).
#[test]
fn rfc7296_3_1_header_layout() {
    let mut bytes = vec![
        1, 2, 3, 4, 5, 6, 7, 8, // SPIi
        0, 0, 0, 0, 0, 0, 0, 0, // SPIr
        40, 0x20, 34, 0x08, // next = Nonce, version 2.0, IKE_SA_INIT, I flag
        0, 0, 0, 0, // message ID
        0, 0, 0, 48, // length
        0, 0, 0, 20, // Nonce payload header
    ];
    bytes.extend_from_slice(&[0xaa; 16]);
    let m = Message::parse(&bytes).expect("valid message");
    assert_eq!(m.header.spi_i, 0x0102030405060708);
    assert_eq!(m.header.exchange, exchange::IKE_SA_INIT);
    assert!(m.header.from_initiator() && !m.header.is_response());
    assert_eq!(m.payloads, vec![Payload::Nonce(vec![0xaa; 16])]);
    assert_eq!(m.emit(), bytes);
}

#[test]
fn rfc7296_2_5_unknown_payloads() {
    let mut bytes = Message {
        header: Header {
            spi_i: 1,
            spi_r: 2,
            exchange: 37,
            flags: 0,
            message_id: 3,
        },
        payloads: vec![
            Payload::Other {
                kind: 200,
                body: vec![1, 2],
            },
            Payload::Nonce(vec![7; 16]),
        ],
    }
    .emit();
    let m = Message::parse(&bytes).expect("non-critical unknown is skipped");
    assert_eq!(m.payloads, vec![Payload::Nonce(vec![7; 16])]);
    bytes[HEADER_LEN + 1] = 0x80;
    assert_eq!(
        Message::parse(&bytes),
        Err(ParseError::UnsupportedCritical(200))
    );
}

#[test]
fn rejects_bad_lengths_and_versions() {
    let good = Message {
        header: Header {
            spi_i: 1,
            spi_r: 0,
            exchange: 34,
            flags: 8,
            message_id: 0,
        },
        payloads: vec![Payload::Nonce(vec![1; 32])],
    }
    .emit();
    assert_eq!(
        Message::parse(&good[..good.len() - 1]),
        Err(ParseError::Truncated)
    );
    let mut v3 = good.clone();
    v3[17] = 0x30;
    assert_eq!(Message::parse(&v3), Err(ParseError::Version(3)));
    let mut short_payload = good.clone();
    short_payload[HEADER_LEN + 3] = 3;
    assert_eq!(Message::parse(&short_payload), Err(ParseError::Malformed));
    let mut long = good;
    long.push(0);
    assert_eq!(Message::parse(&long), Err(ParseError::Malformed));
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn ip() -> impl Strategy<Value = (IpAddr, IpAddr)> {
    prop_oneof![
        (any::<u32>(), any::<u32>())
            .prop_map(|(a, b)| (IpAddr::V4(Ipv4Addr::from(a)), IpAddr::V4(Ipv4Addr::from(b)))),
        (any::<u128>(), any::<u128>())
            .prop_map(|(a, b)| (IpAddr::V6(Ipv6Addr::from(a)), IpAddr::V6(Ipv6Addr::from(b)))),
    ]
}

fn selector() -> impl Strategy<Value = TrafficSelector> {
    (any::<u8>(), any::<u16>(), any::<u16>(), ip()).prop_map(
        |(protocol, start_port, end_port, (start, end))| TrafficSelector {
            protocol,
            start_port,
            end_port,
            start,
            end,
        },
    )
}

fn attribute() -> impl Strategy<Value = Attribute> {
    prop_oneof![
        (0u16..0x8000, any::<u16>()).prop_map(|(kind, value)| Attribute::Tv { kind, value }),
        (0u16..0x8000, bytes(8)).prop_map(|(kind, value)| Attribute::Tlv { kind, value }),
    ]
}

fn proposal() -> impl Strategy<Value = Proposal> {
    let transform = (
        any::<u8>(),
        any::<u16>(),
        proptest::collection::vec(attribute(), 0..3),
    )
        .prop_map(|(kind, id, attributes)| Transform {
            kind,
            id,
            attributes,
        });
    (
        any::<u8>(),
        any::<u8>(),
        bytes(9),
        proptest::collection::vec(transform, 0..6),
    )
        .prop_map(|(number, protocol, spi, transforms)| Proposal {
            number,
            protocol,
            spi,
            transforms,
        })
}

fn payload() -> impl Strategy<Value = Payload> {
    prop_oneof![
        proptest::collection::vec(proposal(), 1..4).prop_map(Payload::Sa),
        (any::<u16>(), bytes(70)).prop_map(|(group, data)| Payload::Ke { group, data }),
        (any::<u8>(), bytes(40))
            .prop_map(|(kind, data)| Payload::IdI(Identification { kind, data })),
        (any::<u8>(), bytes(40))
            .prop_map(|(kind, data)| Payload::IdR(Identification { kind, data })),
        (any::<u8>(), bytes(90)).prop_map(|(encoding, data)| Payload::Cert { encoding, data }),
        (any::<u8>(), bytes(60)).prop_map(|(encoding, data)| Payload::CertReq { encoding, data }),
        (any::<u8>(), bytes(80)).prop_map(|(method, data)| Payload::Auth { method, data }),
        proptest::collection::vec(any::<u8>(), 16..64).prop_map(Payload::Nonce),
        (any::<u8>(), bytes(8), any::<u16>(), bytes(20)).prop_map(|(protocol, spi, kind, data)| {
            Payload::Notify(Notify {
                protocol,
                spi,
                kind,
                data,
            })
        }),
        (1u8..4, proptest::collection::vec(any::<[u8; 4]>(), 1..4)).prop_map(|(protocol, spis)| {
            Payload::Delete(Delete {
                protocol,
                spi_size: 4,
                spis: spis.into_iter().map(|s| s.to_vec()).collect(),
            })
        }),
        Just(Payload::Delete(Delete {
            protocol: 1,
            spi_size: 0,
            spis: vec![]
        })),
        bytes(20).prop_map(Payload::VendorId),
        proptest::collection::vec(selector(), 0..4).prop_map(Payload::TsI),
        proptest::collection::vec(selector(), 0..4).prop_map(Payload::TsR),
        (
            any::<u8>(),
            proptest::collection::vec((0u16..0x8000, bytes(17)), 0..4)
        )
            .prop_map(|(kind, a)| {
                let attributes = a
                    .into_iter()
                    .map(|(kind, value)| CfgAttribute { kind, value })
                    .collect();
                Payload::Cp(Configuration { kind, attributes })
            }),
        bytes(30).prop_map(|body| Payload::Other {
            kind: kind::EAP,
            body
        }),
    ]
}

fn tail() -> impl Strategy<Value = Option<Payload>> {
    prop_oneof![
        Just(None),
        (any::<u8>(), bytes(60)).prop_map(|(first, body)| Some(Payload::Sk { first, body })),
        (any::<u8>(), 1u16..5, bytes(60)).prop_map(|(first, number, body)| Some(Payload::Skf {
            first,
            number,
            total: 5,
            body
        })),
    ]
}

proptest! {
    #[test]
    fn parse_emit_round_trip(
        spi_i in any::<u64>(), spi_r in any::<u64>(), exchange in any::<u8>(), flags in any::<u8>(),
        message_id in any::<u32>(), mut payloads in proptest::collection::vec(payload(), 0..6),
        last in tail(),
    ) {
        payloads.extend(last);
        let message = Message { header: Header { spi_i, spi_r, exchange, flags, message_id }, payloads };
        let bytes = message.emit();
        prop_assert_eq!(Message::parse(&bytes), Ok(message));
    }

    #[test]
    fn parse_never_panics(data in bytes(400)) {
        let _ = Message::parse(&data);
        let _ = parse_chain(kind::SA, &data);
    }

    #[test]
    fn parse_survives_corrupted_valid_messages(
        payloads in proptest::collection::vec(payload(), 1..5), at in any::<usize>(), byte in any::<u8>(),
    ) {
        let message = Message { header: Header { spi_i: 9, spi_r: 8, exchange: 35, flags: 8, message_id: 1 }, payloads };
        let mut bytes = message.emit();
        let i = at % bytes.len();
        bytes[i] = byte;
        if let Ok(m) = Message::parse(&bytes) {
            prop_assert_eq!(Message::parse(&m.emit()).map(|m| m.payloads.len()), Ok(m.payloads.len()));
        }
    }
}
