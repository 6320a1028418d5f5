package cache

import (
	"errors"
)

// Tiered is a store whose responses live in Back (a Disk) and whose hot
// ones are kept in Front (a Memory) too: a hit in Front costs no file;
// one in Back is copied into Front when it is small enough (Front's
// eviction policy then decides whether it stays). Stats are Back's.
type Tiered struct {
	Front *Memory
	Back  Store
	// Promote bounds the bodies kept in Front, stored there by Put or
	// copied there on a hit in Back; 0 means a sixty-fourth of Front.
	Promote int64
}

// Get returns the response under key, from Front or else from Back.
func (t *Tiered) Get(key string) (*Object, error) {
	if o, err := t.Front.Get(key); err != nil || o != nil {
		return o, err
	}
	o, err := t.Back.Get(key)
	if err != nil || o == nil {
		return o, err
	}
	if o.Body.File == nil || o.Body.Size > t.promote() {
		return o, nil
	}
	body := make([]byte, o.Body.Size)
	if _, err := o.Body.File.ReadAt(body, o.Body.Offset); err != nil {
		return o, nil // served from the file, not promoted
	}
	o.Close()
	m := &Object{Meta: o.Meta, Body: Body{Size: int64(len(body)), Bytes: body}}
	t.Front.Put(key, m)
	return m, nil
}

// promote is the largest body kept in Front.
func (t *Tiered) promote() int64 {
	if t.Promote > 0 {
		return t.Promote
	}
	return t.Front.capacity.Load() / 64
}

// Put stores o in Back, and in Front too when its body is at most
// Promote bytes.
func (t *Tiered) Put(key string, o *Object) error {
	err := t.Back.Put(key, o)
	if o.Body.Size <= t.promote() {
		t.Front.Put(key, o)
	}
	return err
}

// Update replaces the Meta under key in both tiers.
func (t *Tiered) Update(key string, m *Meta) error {
	return errors.Join(t.Back.Update(key, m), t.Front.Update(key, m))
}

// Delete removes key from both tiers.
func (t *Tiered) Delete(key string) error {
	return errors.Join(t.Back.Delete(key), t.Front.Delete(key))
}

// Purge removes what p selects from both tiers, and counts Back's.
func (t *Tiered) Purge(p Purge) (int, error) {
	t.Front.Purge(p)
	return t.Back.Purge(p)
}

// Stats returns Back's counts.
func (t *Tiered) Stats() Stats { return t.Back.Stats() }

// Close closes both tiers.
func (t *Tiered) Close() error {
	return errors.Join(t.Front.Close(), t.Back.Close())
}
