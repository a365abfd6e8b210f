//! The packets being held: a min-heap by (due time, arrival sequence), so
//! packets due at the same nanosecond leave in the order they came.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

#[derive(Default)]
pub struct HoldQueue {
    heap: BinaryHeap<Reverse<(u64, u64, u32)>>,
    arrivals: u64,
}

impl HoldQueue {
    /// Holds packet `id` until `due_ns`.
    pub fn push(&mut self, due_ns: u64, id: u32) {
        self.heap.push(Reverse((due_ns, self.arrivals, id)));
        self.arrivals += 1;
    }

    /// The earliest due time, if anything is held.
    pub fn next_due(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    /// The earliest packet (due time, id) if it is due at `now_ns`; with
    /// `now_ns` = u64::MAX, every packet in turn.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<(u64, u32)> {
        match self.heap.peek() {
            Some(Reverse((due, _, _))) if *due <= now_ns => self.heap.pop().map(|Reverse((due, _, id))| (due, id)),
            _ => None,
        }
    }

    pub fn held(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_by_due_then_arrival() {
        let mut q = HoldQueue::default();
        q.push(300, 1);
        q.push(100, 2);
        q.push(200, 3);
        q.push(100, 4);
        assert_eq!((q.held(), q.next_due()), (4, Some(100)));
        assert_eq!(q.pop_due(99), None);
        assert_eq!(q.pop_due(150), Some((100, 2)));
        assert_eq!(q.pop_due(150), Some((100, 4)));
        assert_eq!(q.pop_due(150), None);
        assert_eq!(q.pop_due(u64::MAX), Some((200, 3)));
        assert_eq!(q.pop_due(u64::MAX), Some((300, 1)));
        assert_eq!((q.held(), q.next_due()), (0, None));
    }
}
