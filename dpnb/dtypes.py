"""nnabla's ``nnabla.dtypes``: the integer codes by which nnabla's files and function
arguments name NumPy dtypes (nnabla's own spelling of the first table's name kept)."""
import numpy as np

np_dtpye_to_int = {bool: 0, np.byte: 1, np.ubyte: 2, np.short: 3, np.ushort: 4, np.int32: 5,
                   np.uint32: 6, np.longlong: 9, np.int64: 9, np.ulonglong: 10, np.uint64: 10,
                   np.float32: 11, np.double: 12, np.longdouble: 13}
int_to_np_dtype = {code: dtype for dtype, code in np_dtpye_to_int.items()}
