/**
 * Loss, duplication and reordering of one numbered stream (one sender as one receiver sees it),
 * with a 64-entry window below the highest number seen, the way DTLS keeps its replay window.
 * Numbers start anywhere; what counts as expected is the range from the first number seen to
 * the highest, so a receiver that joins late or leaves early is not charged for what it could
 * not have received.
 */
export class SequenceTracker {
  private first = -1;
  private highest = -1;
  /** Bit i: number `highest - 1 - i` was received (two 32-bit halves). */
  private low = 0;
  private high = 0;
  received = 0;
  duplicates = 0;
  /** Arrived after a higher number (within the window). */
  reordered = 0;
  /** Arrived more than 64 behind the highest: too old to tell a duplicate from a late one. */
  tooOld = 0;

  /** Records number `seq` (a non-negative integer). Returns false for a duplicate. */
  see(seq: number): boolean {
    if (this.first < 0) {
      this.first = seq;
      this.highest = seq;
      this.received = 1;
      return true;
    }
    if (seq > this.highest) {
      const shift = seq - this.highest;
      // Shift the window by `shift`, bringing in the old highest at bit shift-1.
      if (shift >= 64) {
        this.low = 0;
        this.high = 0;
      } else if (shift >= 32) {
        this.high = (this.low << (shift - 32)) >>> 0;
        this.low = 0;
      } else {
        this.high = ((this.high << shift) | (this.low >>> (32 - shift))) >>> 0;
        this.low = (this.low << shift) >>> 0;
      }
      this.setBit(shift - 1);
      this.highest = seq;
      this.received++;
      return true;
    }
    if (seq === this.highest) {
      this.duplicates++;
      return false;
    }
    const back = this.highest - 1 - seq;
    if (back >= 64 || seq < this.first) {
      if (seq < this.first) {
        // Earlier than anything seen: a late packet from before the first one; widen the range.
        this.first = seq;
        this.setBit(back);
        this.received++;
        this.reordered++;
        return true;
      }
      this.tooOld++;
      this.received++;
      return true;
    }
    if (this.getBit(back)) {
      this.duplicates++;
      return false;
    }
    this.setBit(back);
    this.received++;
    this.reordered++;
    return true;
  }

  /** The highest number seen so far (-1 before the first). */
  get latest(): number {
    return this.highest;
  }

  /** Numbers the receiver should have had: first to highest. */
  get expected(): number {
    return this.first < 0 ? 0 : this.highest - this.first + 1;
  }

  /** Numbers in the expected range never received (so far). */
  get lost(): number {
    return Math.max(0, this.expected - this.received);
  }

  private setBit(i: number): void {
    if (i < 0 || i >= 64) return;
    if (i < 32) this.low = (this.low | (1 << i)) >>> 0;
    else this.high = (this.high | (1 << (i - 32))) >>> 0;
  }

  private getBit(i: number): boolean {
    return i < 32 ? (this.low & (1 << i)) !== 0 : (this.high & (1 << (i - 32))) !== 0;
  }
}
