/**
 * The inspector: captures (pcap, pcapng) and live streams decoded across every protocol, the
 * Wireshark dissector generator, and the recorder. See docs/inspect.md.
 */
export { CaptureError, CaptureErrorCode, CaptureParser, readCapture } from './capture.js';
export {
  DEFAULT_INSPECT_OPTIONS,
  type InspectOptions,
  Inspector,
  type InspectRecord,
  type PortMapping,
} from './inspector.js';
export { accepts, type RecordFilter, recordJson, tableLine } from './output.js';
export { PacketDecoder } from './packet.js';
export { loadFlowProtocols } from './protocols.js';
export { TcpReassembler } from './tcp.js';
export {
  ipPacket,
  LinkType,
  pcapFileHeader,
  pcapngInterface,
  pcapngPacket,
  pcapngSectionHeader,
  pcapRecord,
} from './writer.js';
